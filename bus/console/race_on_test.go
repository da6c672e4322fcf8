//go:build race

package console_test

// raceOn: the race detector slows the store's reads about twentyfold, so
// the tests that fill it for size take a smaller size under it.
const raceOn = true
