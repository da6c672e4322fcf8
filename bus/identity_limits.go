package bus

import (
	"github.com/bub-bus/bub/auth"
)

// Limits per identity. A credential may open many connections, from
// many addresses, under many clientIds its grant allows; what it may
// take of the bus is bounded per identity as well as per connection
// and per address: its publish rate (one token bucket, shared by all its
// connections and HTTP publishers), its WebSocket connections and its
// journal streams. On an open bus there is no identity, and a clientId
// stands for one (holding.limitKeyLocked) for the rate only. The
// buckets are internal/ratelimit's, the counts internal/slots'.

// takeIdentitySlot counts c against its identity's cap on connections,
// at initialize: its grant's max_connections, else
// MaxConnectionsPerIdentity. It returns the release cleanup calls.
func (c *conn) takeIdentitySlot(p *auth.Principal) (func(), error) {
	identity, bound := p.Name(), p.MaxConnections()
	if bound <= 0 {
		bound = c.server.limits().MaxConnectionsPerIdentity
	}
	release, held := c.server.limitState.identityConns.Take(identity, bound)
	if release != nil {
		return release, nil
	}
	c.log.Info("initialize refused: limit reached", "identity", identity, "limit", limitConnsPerIdentity, "max", bound)
	return nil, c.server.limitReached(limitConnsPerIdentity, "identity %q holds %d connections, its limit %d; close one first", identity, held, bound)
}
