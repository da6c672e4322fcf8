package ratelimit

import (
	"runtime"
	"testing"
	"time"
)

// TestAllow: a bucket gives its burst at once, then a token per 1/rate,
// saying how long until the next; a new rate or size applies from the
// take that names it, with the tokens the bucket holds.
func TestAllow(t *testing.T) {
	var b Bucket
	now := time.Unix(1_000_000, 0)
	for i := range 2 {
		if _, ok := b.Allow(now, 10, 2); !ok {
			t.Fatalf("take %d of a burst of 2 refused", i+1)
		}
	}
	wait, ok := b.Allow(now, 10, 2)
	if ok || wait != 100*time.Millisecond {
		t.Fatalf("third take at once: ok %v, wait %v; want refused, 100ms", ok, wait)
	}
	if _, ok := b.Allow(now.Add(100*time.Millisecond), 10, 2); !ok {
		t.Fatal("a take 1/rate later refused")
	}
	// Half a token accrued at 10/s; at 1/s the other half takes 500ms.
	wait, ok = b.Allow(now.Add(150*time.Millisecond), 1, 2)
	if ok || wait != 500*time.Millisecond {
		t.Fatalf("take after the rate fell: ok %v, wait %v; want refused, 500ms", ok, wait)
	}
}

// TestBucketsByKey: a key's bucket is the same while it is held, another
// key's is its own, and a bucket nothing holds is forgotten.
func TestBucketsByKey(t *testing.T) {
	var t0 Buckets
	a := t0.Of("a")
	if t0.Of("a") != a {
		t.Fatal("a held bucket was made again")
	}
	if t0.Of("b") == a {
		t.Fatal("two keys share a bucket")
	}
	runtime.KeepAlive(a)
	// Nothing holds either bucket now: collections run their cleanups.
	for i := 0; ; i++ {
		runtime.GC()
		runtime.Gosched() // the cleanups run on a goroutine of their own
		t0.mu.Lock()
		n := len(t0.all)
		t0.mu.Unlock()
		if n == 0 {
			return
		}
		if i == 100 {
			t.Fatalf("after %d collections the table still holds %d buckets nothing holds", i, n)
		}
	}
}
