package bus

import (
	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/internal/rpcstream"
	"github.com/bub-bus/bub/protocol"
)

// subscriptions.setWaker names the caller (the spawner) as the waker of
// a durable subscriber. It is no administration: a waker sets its own,
// in the connection's order, as subscribe does.

func (c *conn) subscriptionsWaker(req *rpcstream.Request) (any, error) {
	var p protocol.SubscriptionsWakerParams
	if err := decodeParams(req, &p); err != nil {
		return nil, err
	}
	if err := protocol.ValidateClientID(p.ClientID); err != nil {
		return nil, protocol.Errorf(protocol.ErrInvalidParams, "clientId: %v", err)
	}
	c.mu.Lock()
	access, identity, waker := c.access, c.identity, c.clientID
	c.mu.Unlock()
	if access != nil && !access.Waker() {
		return nil, c.refuse(refuseWaker, identity, waker, p.ClientID,
			protocol.Errorf(protocol.ErrForbidden, "credential %q may not be a waker (its grant needs waker: true)", identity))
	}
	d := c.server.durables
	if !d.enabled() {
		return nil, protocol.Errorf(protocol.ErrInvalidParams, "this bus keeps no durable subscriptions (its store cannot)")
	}
	err := d.record(p.ClientID, "", 0, nil, func(r *store.DurableOwner) {
		switch {
		case !p.Clear:
			r.Waker = waker
		case r.Waker == waker:
			r.Waker = ""
		}
	})
	if err != nil {
		return nil, protocol.Errorf(protocol.ErrInternal, "set the waker of %q: %v", p.ClientID, err)
	}
	return protocol.SuccessResult{Success: true}, nil
}
