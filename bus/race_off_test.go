//go:build !race

package bus_test

// raceOn: see race_on_test.go.
const raceOn = false
