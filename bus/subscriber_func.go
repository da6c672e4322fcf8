package bus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/coder/websocket"

	"github.com/bub-bus/bub/protocol"
)

// A subscriber need not be a peer's WebSocket connection: an add-on adds
// one made of a function (a webhook's URL, say) with Subscribe. The core
// routes to it, keeps its turns in each publisher's order, retries,
// holds, dead-letters and tells the observers about its deliveries as it
// does for a peer; only the attempt itself is the function's.

// SubscriberSpec says what a subscriber added with Subscribe subscribes
// to.
type SubscriberSpec struct {
	// ClientID names the subscriber in acks, retries, dead letters and
	// the journal. It must begin with "bub-", which no peer may
	// initialize as, so that no peer can take its deliveries or its
	// retries.
	ClientID string
	// Pattern is the topic pattern subscribed to.
	Pattern string
	// Policy is the subscription's propagation policy. Default: the
	// bus's (Options.DefaultPolicy).
	Policy protocol.Policy
}

// A Subscriber is a subscriber added with Subscribe.
type Subscriber struct {
	f *funcSubscriber
}

// funcSubscriber is a Subscriber in the router: the third kind of
// subscriber, beside a connection and a cluster stand-in.
type funcSubscriber struct {
	holding
	deliverFunc DeliverFunc
}

var _ subscriber = (*funcSubscriber)(nil)

// Subscribe adds a subscriber whose deliveries deliver makes, with the
// one subscription spec says. It is this node's alone: a cluster's
// nodes do not share such subscribers yet, and on a cluster Subscribe is
// refused. A ClientID taken by another such subscriber is refused.
// Subscribe may be called from Extend, where the subscriber is there
// for the pending work that resumes after it, and at any time after.
func (s *Server) Subscribe(spec SubscriberSpec, deliver DeliverFunc) (*Subscriber, error) {
	if !strings.HasPrefix(spec.ClientID, serverIDPrefix) {
		return nil, fmt.Errorf("clientId %q: want one beginning with %s, which no peer may take", spec.ClientID, serverIDPrefix)
	}
	pattern, err := protocol.ParsePattern(spec.Pattern)
	if err != nil {
		return nil, fmt.Errorf("pattern: %w", err)
	}
	policy := spec.Policy
	if policy == "" {
		policy = s.opts.DefaultPolicy
	}
	if !policy.Valid() {
		return nil, fmt.Errorf("policy %q: want one of %v", policy, protocol.Policies)
	}
	if s.opts.Cluster != nil {
		return nil, errors.New("subscribers added with Subscribe are not yet shared by a cluster's nodes; run them on a single node")
	}
	f := &funcSubscriber{
		holding:     holding{server: s, log: s.log.With("subscriber", spec.ClientID), clientID: spec.ClientID, subs: make(map[string]*subscription)},
		deliverFunc: deliver,
	}
	s.funcMu.Lock()
	defer s.funcMu.Unlock()
	if s.funcSubs[spec.ClientID] != nil {
		return nil, fmt.Errorf("clientId %q is subscribed already", spec.ClientID)
	}
	_, seq, err := s.cl.cluster.PutSubscription(context.Background(), SharedSubscription{Pattern: pattern.String(), Policy: policy, ClientID: spec.ClientID})
	if err != nil {
		return nil, fmt.Errorf("order subscription: %w", err)
	}
	sub := &subscription{seq: seq, pattern: pattern, policy: policy, to: f}
	f.subs[pattern.String()] = sub
	if s.funcSubs == nil {
		s.funcSubs = make(map[string]*funcSubscriber)
	}
	s.funcSubs[spec.ClientID] = f
	s.router.insert(sub)
	s.sched.wakeHolds(pattern, spec.ClientID)
	return &Subscriber{f: f}, nil
}

// Close takes the subscriber out of the router: it gets no more
// deliveries, and its pending retries find no subscriber and are
// dead-lettered subscriber_gone in time.
func (u *Subscriber) Close() {
	s := u.f.server
	s.funcMu.Lock()
	if s.funcSubs[u.f.clientID] == u.f {
		delete(s.funcSubs, u.f.clientID)
	}
	s.funcMu.Unlock()
	u.f.close(0, "")
}

// funcSubscriber returns the subscriber added with Subscribe with
// clientID, or nil.
func (s *Server) funcSubscriber(clientID string) *funcSubscriber {
	s.funcMu.Lock()
	defer s.funcMu.Unlock()
	return s.funcSubs[clientID]
}

// close stops the subscriber's deliveries: it leaves the router.
func (f *funcSubscriber) close(websocket.StatusCode, string) {
	f.mu.Lock()
	f.closed = true
	subs := f.subs
	f.subs = map[string]*subscription{}
	f.mu.Unlock()
	for _, sub := range subs {
		f.server.router.remove(sub)
	}
}

// pendingCapLocked is the bus's per-identity cap: such a subscriber has
// no grant.
func (f *funcSubscriber) pendingCapLocked(l *Limits) int { return l.MaxPendingPerIdentity }

// deliver makes one attempt of d by the function, bounded by the
// delivery timeout as a peer's call is.
func (f *funcSubscriber) deliver(ctx context.Context, d *delivery) (protocol.ProcessMessageResult, error) {
	s := f.server
	ctx, cancel := context.WithTimeout(ctx, s.opts.DeliveryTimeout)
	defer cancel()
	written := d.written
	if d.turn != nil {
		written = d.turn.pass
	}
	var once sync.Once
	pub := &Delivery{Message: d.Message, ClientID: d.ClientID, Subscription: d.Subscription, Attempt: d.Attempt, d: d, written: func() {
		if written != nil {
			once.Do(written)
		}
	}}
	defer pub.Written()
	r, err := f.deliverFunc(ctx, pub)
	switch {
	case err == nil:
		return r, nil
	case errors.Is(err, context.DeadlineExceeded):
		return r, &deliveryError{failTimeout, err.Error()}
	}
	return r, &deliveryError{failDisconnected, err.Error()}
}
