// Package fuzz holds the fuzz stage's driver, run.sh, and the tests of its decisions:
// which failed runs it repeats (only Go's coordinator deadline race) and which fail the
// stage (everything else). The fuzz targets themselves live beside the code they fuzz.
//
// Privilege: none; tests and CI only. It has no non-test code.
package fuzz
