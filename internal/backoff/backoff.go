// Package backoff computes the waits between retries that the bus, its
// peers, the spawner and the bridges share: a delay that doubles with
// each try up to a cap, and jitter that spreads out the retries of many
// clients that failed together.
//
// The waits are pure functions of the number of tries, not a stateful
// timer as in github.com/cenkalti/backoff: the bus persists a delivery's
// attempts and computes its next time from them after a restart, and its
// cap is a promise (RetryDelayCap), which that library's jitter may
// exceed.
package backoff

import (
	"math/rand/v2"
	"time"
)

// Exponential returns base doubled n times, capped at limit: base for
// n <= 0. It does not overflow, however large n is.
func Exponential(base, limit time.Duration, n int) time.Duration {
	d := min(base, limit)
	for i := 0; i < n && d > 0 && d < limit; i++ {
		if d > limit/2 {
			return limit
		}
		d *= 2
	}
	return d
}

// Jitter returns a random wait between d/2 and d ("equal jitter"): half
// fixed, so that a retry never comes much sooner than planned, and half
// random, so that the retries of many clients that failed together do
// not come back in step.
func Jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return d/2 + rand.N(d/2+1)
}
