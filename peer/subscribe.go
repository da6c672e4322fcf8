package peer

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/bub-bus/bub/protocol"
)

// SubscribeOptions configure one subscription. A nil *SubscribeOptions
// means the defaults.
type SubscribeOptions struct {
	// Policy decides, after this subscription's handler answered, whether
	// the message goes on to older matching subscriptions. Default: the
	// bus's default policy (stopPropagationOnProcessed unless the bus was
	// started with another).
	Policy protocol.Policy
	// Fallback makes the subscription a fallback: the bus delivers a
	// message to it only when no regular subscription matches the topic.
	// A fallback handler that answers ShouldRetry has the bus route the
	// message again over the regular subscriptions, which is how a
	// default handler spawns an agent and then hands it the message.
	// Default: false, a regular subscription.
	Fallback bool
	// Durable makes the subscription the clientId's rather than the
	// connection's (docs/PROTOCOL.md, "Durable subscriptions"): it
	// outlives this Conn and restarts of the bus, messages matching it
	// while no connection of the clientId holds it are held for it, and
	// subscribing to it again (a new process with the same clientId, or
	// this Conn after a reconnect) delivers them, in order. Unsubscribe
	// ends it. It needs a grant with durable: true. Default: false.
	Durable bool
	// MaxConcurrentHandlers, when positive, bounds this subscription's
	// handlers running at once on a budget of its own, apart from the
	// Conn's Options.MaxConcurrentHandlers: its deliveries neither take
	// the Conn's shared places nor are refused for want of one. A
	// subscription whose deliveries must get through while the others'
	// handlers block needs one: the spawner's system:client.*, whose
	// events the bus never sends again, while every shared place holds a
	// conversation waiting for an agent. Default: 0, the Conn's shared
	// bound.
	MaxConcurrentHandlers int
}

// subscription is one pattern the Conn holds, with its handler.
type subscription struct {
	pattern  string
	policy   protocol.Policy
	fallback bool
	durable  bool
	handler  Handler
	// slots bounds the subscription's handlers running at once; nil for
	// the Conn's shared bound.
	slots chan struct{}
}

func (s *subscription) params() protocol.SubscribeParams {
	return protocol.SubscribeParams{Topic: s.pattern, Policy: s.policy, Fallback: s.fallback, Durable: s.durable}
}

// Subscribe subscribes pattern (an exact topic, a prefix ending in ':' or
// '-', or an fnmatch-style glob; see docs/PROTOCOL.md) and runs handler for
// every message delivered through it. A pattern is held once per Conn: a
// second Subscribe of the same string fails with code -32003 until
// Unsubscribe. Under last-match-wins routing a newer subscription is asked
// first, and the Conn restores its subscriptions in this order after a
// reconnect.
//
// While the Conn is disconnected Subscribe fails with ErrDisconnected; it
// is not queued for the next connection.
func (c *Conn) Subscribe(ctx context.Context, pattern string, handler Handler, opts *SubscribeOptions) error {
	if handler == nil {
		return fmt.Errorf("subscribe %q: handler is nil", pattern)
	}
	sub := &subscription{pattern: pattern, handler: handler}
	if opts != nil {
		sub.policy = opts.Policy
		sub.fallback = opts.Fallback
		sub.durable = opts.Durable
		if opts.MaxConcurrentHandlers > 0 {
			sub.slots = make(chan struct{}, opts.MaxConcurrentHandlers)
		}
	}
	s, err := c.lockSubscriptions()
	if err != nil {
		return fmt.Errorf("subscribe %q: %w", pattern, err)
	}
	defer c.subMu.Unlock()
	// The handler is in place before the bus answers, because the first
	// delivery may arrive before the answer does.
	c.mu.Lock()
	if _, dup := c.byPattern[pattern]; dup {
		c.mu.Unlock()
		return fmt.Errorf("subscribe %q: %w", pattern, protocol.Errorf(protocol.ErrAlreadySubscribed, "this connection already subscribed to %q", pattern))
	}
	c.subs = append(c.subs, sub)
	c.byPattern[pattern] = sub
	c.mu.Unlock()
	if err := c.subscribeOn(ctx, s, sub.params()); err != nil {
		c.forget(sub)
		return fmt.Errorf("subscribe %q: %w", pattern, err)
	}
	return nil
}

// subscribeOn asks the bus for a subscription the Conn does not hold yet.
// A subscribe whose call timed out may have been applied all the same, so
// the Conn remembers it on the session: when the bus then says "already
// subscribed", that earlier call is what it holds. With the same params
// that is the subscription asked for; with others it is replaced, so the
// bus never keeps a policy the Conn does not know of.
func (c *Conn) subscribeOn(ctx context.Context, s *session, p protocol.SubscribeParams) error {
	err := c.callOn(ctx, s, protocol.MethodSubscribe, p, nil, 0)
	earlier, unsure := s.unsure[p.Topic]
	switch {
	case err == nil:
		s.setUnsure(p, false)
		return nil
	case errors.Is(err, ErrCallTimeout) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		s.setUnsure(p, true)
		return err
	case !unsure || protocol.CodeOf(err) != protocol.CodeAlreadySubscribed:
		return err
	}
	s.setUnsure(p, false)
	if earlier == p {
		return nil
	}
	if err := c.callOn(ctx, s, protocol.MethodUnsubscribe, protocol.UnsubscribeParams{Topic: p.Topic}, nil, 0); err != nil {
		return fmt.Errorf("replace the subscription an earlier, timed-out call made: %w", err)
	}
	return c.subscribeOn(ctx, s, p)
}

// Unsubscribe ends the subscription to pattern, the exact string given to
// Subscribe. Deliveries already on their way are still handled. A pattern
// the Conn does not hold fails with code -32004.
func (c *Conn) Unsubscribe(ctx context.Context, pattern string) error {
	s, err := c.lockSubscriptions()
	if err != nil {
		return fmt.Errorf("unsubscribe %q: %w", pattern, err)
	}
	defer c.subMu.Unlock()
	// A pattern whose subscribe timed out may be held by the bus though
	// not by the Conn: it is unsubscribed all the same.
	sub := c.subscription(pattern)
	_, unsure := s.unsure[pattern]
	if sub == nil && !unsure {
		return fmt.Errorf("unsubscribe %q: %w", pattern, protocol.Errorf(protocol.ErrSubscriptionNotFound, "this connection holds no subscription to %q", pattern))
	}
	// "Not found" from the bus means the two agree already: an earlier
	// unsubscribe timed out after the bus applied it, or an unsure
	// subscribe was never applied.
	err = c.callOn(ctx, s, protocol.MethodUnsubscribe, protocol.UnsubscribeParams{Topic: pattern}, nil, 0)
	if err != nil && protocol.CodeOf(err) != protocol.CodeSubscriptionNotFound {
		return fmt.Errorf("unsubscribe %q: %w", pattern, err)
	}
	s.setUnsure(protocol.SubscribeParams{Topic: pattern}, false)
	if sub != nil {
		c.forget(sub)
	}
	return nil
}

// lockSubscriptions takes subMu for a change to the subscriptions and
// returns the session to make it on. While disconnected it fails at once,
// rather than queue behind a reconnect attempt that holds subMu.
func (c *Conn) lockSubscriptions() (*session, error) {
	if _, err := c.current(); err != nil {
		return nil, err
	}
	c.subMu.Lock()
	s, err := c.current()
	if err != nil {
		c.subMu.Unlock()
		return nil, err
	}
	return s, nil
}

// subscription returns the subscription to pattern, or nil.
func (c *Conn) subscription(pattern string) *subscription {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byPattern[pattern]
}

// forget removes sub from the Conn's subscriptions.
func (c *Conn) forget(sub *subscription) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.subs = slices.DeleteFunc(c.subs, func(s *subscription) bool { return s == sub })
	if c.byPattern[sub.pattern] == sub {
		delete(c.byPattern, sub.pattern)
	}
}
