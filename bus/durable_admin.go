package bus

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/internal/rpcstream"
	"github.com/bub-bus/bub/protocol"
)

// The durable subscriptions' methods besides subscribe and unsubscribe:
// subscriptions.list and subscriptions.remove for operators (admin, as
// the dlq.* methods), subscriptions.setWaker for a waker (the spawner).

func (c *conn) subscriptionsList(req *rpcstream.Request) (any, error) {
	var p protocol.SubscriptionsListParams
	if err := decodeParams(req, &p); err != nil {
		return nil, err
	}
	if p.Limit > maxListLimit || p.Limit < 0 {
		return nil, protocol.Errorf(protocol.ErrInvalidParams, "limit %d is not between 0 and %d; page with the cursor", p.Limit, maxListLimit)
	}
	if p.Limit == 0 {
		p.Limit = 100
	}
	if p.Topic != "" {
		if err := protocol.ValidateTopic(p.Topic); err != nil {
			return nil, protocol.Errorf(protocol.ErrInvalidParams, "topic: %v", err)
		}
	}
	all := c.server.durables.list(&p)
	result := protocol.SubscriptionsListResult{Subscriptions: all}
	if len(all) > p.Limit {
		result.Subscriptions = all[:p.Limit]
		last := all[p.Limit-1]
		result.NextCursor = listCursor(last.ClientID, last.Pattern)
	}
	return result, nil
}

// listCursor is the cursor after a subscription: its owner and pattern,
// which no clientId or pattern can contain a NUL of.
func listCursor(clientID, pattern string) string { return clientID + "\x00" + pattern }

// list returns the durable subscriptions p selects after its cursor, in
// clientId then pattern order: one more than p.Limit when there are more.
func (d *durables) list(p *protocol.SubscriptionsListParams) []protocol.DurableSubscription {
	s := d.server
	d.mu.Lock()
	owners := make([]*owner, 0, len(d.owners))
	for id, o := range d.owners {
		if (p.ClientID == "" || id == p.ClientID) && (p.Identity == "" || o.rec.Identity == p.Identity) && listCursor(id, "\xff") > p.Cursor {
			owners = append(owners, o)
		}
	}
	slices.SortFunc(owners, func(a, b *owner) int { return strings.Compare(a.rec.ClientID, b.rec.ClientID) })
	var out []protocol.DurableSubscription
	for _, o := range owners {
		var held int
		if d.shared != nil {
			held = d.shared.HeldCount(o.id)
		} else {
			held = s.sched.countOwner(o.id, func(string) bool { return true })
		}
		subs := slices.Clone(o.rec.Subscriptions)
		slices.SortFunc(subs, func(a, b store.DurableSubscription) int { return cmp.Compare(a.Pattern, b.Pattern) })
		for _, sub := range subs {
			if listCursor(o.id, sub.Pattern) <= p.Cursor {
				continue
			}
			if p.Topic != "" {
				pattern, err := protocol.ParsePattern(sub.Pattern)
				if err != nil || !pattern.Match(p.Topic) {
					continue
				}
			}
			_, away := o.away.subs[sub.Pattern]
			out = append(out, protocol.DurableSubscription{
				ClientID: o.id, Identity: o.rec.Identity, Pattern: sub.Pattern, Policy: protocol.Policy(sub.Policy),
				Fallback: sub.Fallback, Created: sub.Created.UTC().Format(time.RFC3339Nano), Away: away, Held: held, Waker: o.rec.Waker,
			})
			if len(out) > p.Limit {
				d.mu.Unlock()
				return out
			}
		}
	}
	d.mu.Unlock()
	return out
}

func (c *conn) subscriptionsRemove(req *rpcstream.Request) (any, error) {
	var p protocol.SubscriptionsRemoveParams
	if err := decodeParams(req, &p); err != nil {
		return nil, err
	}
	if p.ClientID == "" || p.Topic == "" {
		return nil, protocol.Errorf(protocol.ErrInvalidParams, "clientId and topic are required")
	}
	s := c.server
	// A connected owner loses it as by its own unsubscribe.
	s.mu.Lock()
	ownerConn := s.clients[p.ClientID]
	s.mu.Unlock()
	if ownerConn != nil {
		if sub, _, _ := ownerConn.removeSubscription(p.Topic); sub != nil {
			s.cl.unshareNow(sub)
		}
	}
	found, err := s.durables.unsubscribeDurable(p.ClientID, p.Topic)
	if err != nil {
		return nil, protocol.Errorf(protocol.ErrInternal, "remove %q of %q: %v", p.Topic, p.ClientID, err)
	}
	if !found {
		return nil, protocol.Errorf(protocol.ErrNotFound, "client %q holds no durable subscription to %q", p.ClientID, p.Topic)
	}
	c.log.Info("durable subscription removed by an operator", "client", p.ClientID, "pattern", p.Topic, "by", c.id())
	return protocol.SuccessResult{Success: true}, nil
}

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
