package bus

import (
	"runtime"
	"sync"
	"time"
	"weak"

	"golang.org/x/time/rate"

	"github.com/bub-bus/bub/auth"
)

// Limits per identity. A credential may open many connections, from
// many addresses, under many clientIds its grant allows; what it may
// take of the bus is bounded per identity as well as per connection
// and per address: its publish rate (one token bucket, shared by all its
// connections and HTTP publishers), its WebSocket connections and its
// journal streams. On an open bus there is no identity, and a clientId
// stands for one (holding.limitKeyLocked) for the rate only.

// rateBucket is one identity's publish token bucket.
type rateBucket struct {
	// mu guards the fields below.
	mu      sync.Mutex
	limiter *rate.Limiter
	// rate and burst are the limiter's, as last set.
	rate  float64
	burst int
}

// allow takes a token at rate r with bucket size burst (both > 0), or
// says how long until one is there.
func (b *rateBucket) allow(now time.Time, r float64, burst int) (time.Duration, bool) {
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

// rateBuckets are the identities' buckets. A connection or publisher
// holds its identity's bucket; the table holds them weakly, so that a
// bucket lives as long as something of its identity does and is
// forgotten after, and an identity that comes back within that time
// finds its bucket as it left it, however many publishers the HTTP
// table forgot meanwhile.
type rateBuckets struct {
	// mu guards all.
	mu  sync.Mutex
	all map[string]weak.Pointer[rateBucket]
}

// of returns identity's bucket.
func (t *rateBuckets) of(identity string) *rateBucket {
	t.mu.Lock()
	defer t.mu.Unlock()
	if b := t.all[identity].Value(); b != nil {
		return b
	}
	if t.all == nil {
		t.all = make(map[string]weak.Pointer[rateBucket])
	}
	b := new(rateBucket)
	wp := weak.Make(b)
	t.all[identity] = wp
	runtime.AddCleanup(b, func(identity string) {
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.all[identity] == wp {
			delete(t.all, identity)
		}
	}, identity)
	return b
}

// identitySlots count what identities hold of a bounded kind (their
// connections, their streams).
type identitySlots struct {
	// mu guards held; it is a leaf: nothing is locked under it.
	mu   sync.Mutex
	held map[string]int
}

// take takes one of identity's slots if it holds fewer than bound (a
// negative bound is no limit), and returns its release, to call once;
// nil and the number held when it is full.
func (t *identitySlots) take(identity string, bound int) (release func(), held int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.held[identity]
	if !under(n, bound) {
		return nil, n
	}
	if t.held == nil {
		t.held = make(map[string]int)
	}
	t.held[identity] = n + 1
	var once sync.Once
	return func() {
		once.Do(func() {
			t.mu.Lock()
			defer t.mu.Unlock()
			if t.held[identity]--; t.held[identity] <= 0 {
				delete(t.held, identity)
			}
		})
	}, 0
}

// takeIdentitySlot counts c against its identity's cap on connections,
// at initialize: its grant's max_connections, else
// MaxConnectionsPerIdentity. It returns the release cleanup calls.
func (c *conn) takeIdentitySlot(p *auth.Principal) (func(), error) {
	identity, bound := p.Name(), p.MaxConnections()
	if bound <= 0 {
		bound = c.server.limits().MaxConnectionsPerIdentity
	}
	release, held := c.server.limitState.identityConns.take(identity, bound)
	if release != nil {
		return release, nil
	}
	c.log.Info("initialize refused: limit reached", "identity", identity, "limit", limitConnsPerIdentity, "max", bound)
	return nil, c.server.limitReached(limitConnsPerIdentity, "identity %q holds %d connections, its limit %d; close one first", identity, held, bound)
}
