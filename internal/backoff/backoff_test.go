package backoff_test

import (
	"math"
	"testing"
	"time"

	"github.com/bub-bus/bub/internal/backoff"
)

func TestExponential(t *testing.T) {
	for _, tc := range []struct {
		base, limit time.Duration
		n           int
		want        time.Duration
	}{
		{time.Second, time.Minute, -1, time.Second},
		{time.Second, time.Minute, 0, time.Second},
		{time.Second, time.Minute, 1, 2 * time.Second},
		{time.Second, time.Minute, 5, 32 * time.Second},
		{time.Second, time.Minute, 6, time.Minute},
		{time.Second, time.Minute, math.MaxInt, time.Minute},
		{time.Minute, time.Second, 0, time.Second},
		{math.MaxInt64 / 3, math.MaxInt64, 2, math.MaxInt64},
		{0, time.Second, math.MaxInt, 0},
	} {
		if got := backoff.Exponential(tc.base, tc.limit, tc.n); got != tc.want {
			t.Errorf("Exponential(%v, %v, %d) = %v, want %v", tc.base, tc.limit, tc.n, got, tc.want)
		}
	}
}

func TestJitter(t *testing.T) {
	for _, d := range []time.Duration{0, 1, 2, time.Second, math.MaxInt64} {
		for range 100 {
			if got := backoff.Jitter(d); got < d/2 || got > d {
				t.Fatalf("Jitter(%v) = %v, want within [%v, %v]", d, got, d/2, d)
			}
		}
	}
	if got := backoff.Jitter(-time.Second); got != 0 {
		t.Errorf("Jitter(-1s) = %v, want 0", got)
	}
}
