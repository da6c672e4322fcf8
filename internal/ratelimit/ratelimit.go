// Package ratelimit keeps token buckets per key (an identity's publish
// rate, shared by every door it publishes through), whose rate and size
// may change between takes, and forgets a key's bucket once nothing
// holds it. It knows nothing of the bus: the bus imports it (bus/limits.go).
package ratelimit

import (
	"runtime"
	"sync"
	"time"
	"weak"

	"golang.org/x/time/rate"
)

// Bucket is one key's token bucket. Its methods are safe for concurrent
// use.
type Bucket struct {
	// mu guards the fields below.
	mu      sync.Mutex
	limiter *rate.Limiter
	// rate and burst are the limiter's, as last set.
	rate  float64
	burst int
}

// Allow takes a token at rate r per second with bucket size burst (both
// > 0), or says how long until one is there. A rate or size other than
// the last call's applies from now, with the tokens the bucket holds.
func (b *Bucket) Allow(now time.Time, r float64, burst int) (time.Duration, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.limiter == nil:
		b.limiter = rate.NewLimiter(rate.Limit(r), burst)
	case b.rate != r || b.burst != burst:
		b.limiter.SetLimitAt(now, rate.Limit(r))
		b.limiter.SetBurstAt(now, burst)
	}
	b.rate, b.burst = r, burst
	if b.limiter.AllowN(now, 1) {
		return 0, true
	}
	// AllowN took nothing; the wait is for the missing part of a token.
	missing := 1 - b.limiter.TokensAt(now)
	return time.Duration(missing / r * float64(time.Second)), false
}

// Buckets are the buckets of many keys. A holder (a connection, a
// publisher) keeps its key's bucket; the table holds them weakly, so
// that a bucket lives as long as something of its key does and is
// forgotten after, and a key that comes back within that time finds its
// bucket as it left it. The zero value is ready for use.
type Buckets struct {
	// mu guards all; it is a leaf: nothing is locked under it.
	mu  sync.Mutex
	all map[string]weak.Pointer[Bucket]
}

// Of returns key's bucket, made if it has none.
func (t *Buckets) Of(key string) *Bucket {
	t.mu.Lock()
	defer t.mu.Unlock()
	if b := t.all[key].Value(); b != nil {
		return b
	}
	if t.all == nil {
		t.all = make(map[string]weak.Pointer[Bucket])
	}
	b := new(Bucket)
	wp := weak.Make(b)
	t.all[key] = wp
	runtime.AddCleanup(b, func(key string) {
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.all[key] == wp {
			delete(t.all, key)
		}
	}, key)
	return b
}
