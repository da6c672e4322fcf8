package bus

import (
	"sync"

	"github.com/bub-bus/bub/auth"
)

// Limits per identity. A credential may open many connections, from
// many addresses, under many clientIds its grant allows; what it may
// take of the bus is bounded per identity as well as per connection
// and per address: its publish rate (one token bucket, shared by all its
// connections and HTTP publishers), its WebSocket connections and its
// journal streams. On an open bus there is no identity, and a clientId
// stands for one (holding.limitKeyLocked) for the rate only. The
// buckets are internal/ratelimit's.

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
