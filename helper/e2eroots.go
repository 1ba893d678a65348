//go:build !brood_e2e

package helper

// readTestBuildEnv does nothing outside the end-to-end tests' build (e2eroots_e2e.go).
func readTestBuildEnv() {}
