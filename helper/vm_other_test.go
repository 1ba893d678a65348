//go:build !linux

package helper

// vmChild: no VM children outside Linux.
func vmChild(string) (int, bool) { return 0, false }

func dumpableChild(string) int { return 3 }
