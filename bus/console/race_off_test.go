//go:build !race

package console_test

// raceOn: see race_on_test.go.
const raceOn = false
