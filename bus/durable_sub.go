package bus

import (
	"cmp"
	"container/heap"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
	"unique"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/protocol"
)

// A durable subscription (docs/PROTOCOL.md, "Durable subscriptions")
// belongs to its clientId, its owner, not to a connection. Each of an
// owner's durable patterns is, at any time, in one of three states:
//
//   - live: a connection of the owner holds it, and the router routes to
//     that connection as to any subscription;
//   - away: the router routes to the owner's absent stand-in, whose
//     deliveries answer "held" at once (errHeld); the walk stores the
//     message for the owner (KindDurable) and tells its waker;
//   - draining: the owner subscribed to it again (durable: true) on a new
//     connection; the router still routes to the stand-in, so messages
//     keep being held in order, while one goroutine (drain) delivers the
//     held messages, oldest first, each answered before the next; once
//     none is left the pattern goes live.
//
// A disconnect turns the owner's live patterns away, in the router in one
// step (router.replace), with their place in the order (seq) kept. The
// records are in the store (store.DurableOwner), one per clientId, read
// back on start.

// errHeld is the failure of a delivery to an away owner: the walk holds
// the message for it.
var errHeld = &deliveryError{Kind: failHeld, Detail: "the subscriber is away; the message is held for it"}

// failHeld is the deliveries outcome of a message held for an away owner.
const failHeld = "held"

// rewakeAfter is how long after a wake event the next message held for
// the same away owner asks its waker again: the waker may have failed to
// start it.
const rewakeAfter = 30 * time.Second

// wakeEpoch is what owner.woke counts from; time.Since keeps the
// monotonic clock.
var wakeEpoch = time.Now()

// durables are the bus's durable subscriptions, by owner.
type durables struct {
	server *Server
	// local is a single node's store; nil on a cluster.
	local *store.Store
	// shared is a cluster's store (durable_cluster.go); nil on a single
	// node. Neither: durable subscriptions are refused.
	shared SharedDurables
	gauge  prometheus.Gauge
	wakes  prometheus.Counter

	// mu guards the owners and their fields. Lock order: after
	// Server.mu, before conn.mu, router.mu and scheduler.mu.
	mu     sync.Mutex
	owners map[string]*owner
	// counts are the durable subscriptions per limit key (identity, or
	// clientId on an open bus), for Limits.MaxDurablePerIdentity.
	counts map[string]int
	// entries are the durable subscriptions in the cluster's order, by
	// key (durable_cluster.go); empty on a single node.
	entries map[string]*sharedEntry
}

// owner is a clientId with durable subscriptions or a waker. Its fields
// are guarded by durables.mu.
type owner struct {
	// id is its clientId, read without durables.mu.
	id  string
	rec store.DurableOwner
	// away stands in for the owner in the router for its away and
	// draining patterns (away.subs).
	away *absent
	// conn is the connection its live and draining patterns are on.
	conn *conn
	// pending are the draining patterns' subscriptions on conn, not yet
	// in the router.
	pending  map[string]*subscription
	draining bool
	// woke is when its waker was last asked to start it, as time since
	// wakeEpoch, 0 for never: 8 bytes where a time.Time takes 24, in a
	// struct kept for every hibernated agent (BenchmarkDurableAwayMemory).
	woke time.Duration
	// shared are its subscriptions in the cluster's order, by pattern;
	// recRev is its record's revision there; moved, when set, is closed
	// at the next change of shared (durable_cluster.go).
	shared map[string]*sharedEntry
	recRev uint64
	moved  chan struct{}
	// writeMu orders the owner's store writes, which are made without
	// durables.mu (no lock is held across a commit); it comes before
	// durables.mu.
	writeMu sync.Mutex
}

// absent is an away owner as the router sees it: a subscriber whose
// deliveries are held.
type absent struct {
	holding
	owner *owner
	// maxPending is the owner's grant's cap, as its last subscribe saw
	// it; guarded by mu.
	maxPending int
}

var _ subscriber = (*absent)(nil)

func (a *absent) deliver(context.Context, *delivery) (protocol.ProcessMessageResult, error) {
	return protocol.ProcessMessageResult{}, errHeld
}

// close does nothing: there is no connection.
func (a *absent) close(websocket.StatusCode, string) {}

func (a *absent) pendingCapLocked(l *Limits) int {
	if a.maxPending > 0 {
		return a.maxPending
	}
	return l.MaxPendingPerIdentity
}

func newDurables(s *Server) *durables {
	d := &durables{
		server:  s,
		owners:  make(map[string]*owner),
		counts:  make(map[string]int),
		entries: make(map[string]*sharedEntry),
		gauge: prometheus.NewGauge(prometheus.GaugeOpts{Name: "bub_durable_subscriptions",
			Help: "Durable subscriptions the bus keeps, their owners connected or away."}),
		wakes: prometheus.NewCounter(prometheus.CounterOpts{Name: "bub_durable_wakes_total",
			Help: "Wake events sent to the wakers of away durable subscribers."}),
	}
	s.metrics.registry.MustRegister(d.gauge, d.wakes)
	return d
}

// ownerLocked returns clientID's owner, made if it has none; d.mu is
// held.
func (d *durables) ownerLocked(clientID, identity string) *owner {
	o := d.owners[clientID]
	if o == nil {
		o = &owner{id: clientID, rec: store.DurableOwner{ClientID: clientID, Identity: identity}}
		o.away = &absent{holding: holding{server: d.server, log: d.server.log, clientID: clientID, identity: identity,
			subs: make(map[string]*subscription, 1)}, owner: o}
		d.owners[clientID] = o
	}
	return o
}

// shareLocked records e as o's subscription to pattern in the cluster's
// order. The map is made on a cluster's first entry only: a single node
// has none, and an empty map is 48 bytes of every hibernated agent's
// (BenchmarkDurableAwayMemory). d.mu is held.
func (o *owner) shareLocked(pattern string, e *sharedEntry) {
	if o.shared == nil {
		o.shared = make(map[string]*sharedEntry, 1)
	}
	o.shared[pattern] = e
}

// absentee returns clientID's stand-in when it has away or draining
// patterns, else nil.
func (d *durables) absentee(clientID string) *absent {
	d.mu.Lock()
	defer d.mu.Unlock()
	if o := d.owners[clientID]; o != nil && len(o.away.subs) > 0 {
		return o.away
	}
	return nil
}

// restore reads the durable subscriptions back from the store on start:
// every owner is away until it subscribes again. They enter the cluster's
// order oldest first, so last match wins among them as before.
func (d *durables) restore(ctx context.Context) error {
	if d.shared != nil {
		return d.restoreShared(ctx)
	}
	if d.local == nil {
		return nil
	}
	owners, err := d.local.DurableOwners()
	if err != nil {
		return err
	}
	type entry struct {
		o   *owner
		sub store.DurableSubscription
	}
	var all []entry
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, rec := range owners {
		// Many owners share an identity and a waker (a spawner's agents)
		// and every subscription one of a few policies: one copy of each
		// string, not one per owner read back.
		rec.Identity, rec.Waker = intern(rec.Identity), intern(rec.Waker)
		for i := range rec.Subscriptions {
			rec.Subscriptions[i].Policy = intern(rec.Subscriptions[i].Policy)
		}
		o := d.ownerLocked(rec.ClientID, rec.Identity)
		o.rec = *rec
		o.away.maxPending = rec.MaxPending
		for _, sub := range rec.Subscriptions {
			all = append(all, entry{o, sub})
		}
	}
	slices.SortStableFunc(all, func(a, b entry) int { return a.sub.Created.Compare(b.sub.Created) })
	for _, e := range all {
		pattern, err := protocol.ParsePattern(e.sub.Pattern)
		if err != nil {
			return fmt.Errorf("durable subscription %q of %q: %w", e.sub.Pattern, e.o.id, err)
		}
		policy := protocol.Policy(e.sub.Policy)
		if !policy.Valid() {
			return fmt.Errorf("durable subscription %q of %q: unknown policy %q", e.sub.Pattern, e.o.id, policy)
		}
		key, rev, err := d.server.cl.cluster.PutSubscription(ctx, SharedSubscription{Pattern: e.sub.Pattern, Policy: policy,
			Fallback: e.sub.Fallback, ClientID: e.o.id, Identity: e.o.rec.Identity})
		if err != nil {
			return fmt.Errorf("durable subscription %q of %q: %w", e.sub.Pattern, e.o.id, err)
		}
		sub := &subscription{seq: rev, key: key, pattern: pattern, policy: policy, fallback: e.sub.Fallback, to: e.o.away}
		e.o.away.subs[e.sub.Pattern] = sub
		d.server.router.insert(sub)
		d.counts[limitKey(e.o.rec.Identity, e.o.id)]++
	}
	d.gauge.Set(float64(len(all)))
	return nil
}

// intern returns the canonical copy of s.
func intern(s string) string {
	return unique.Make(s).Value()
}

// limitKey is whom an owner's durable subscriptions count against.
func limitKey(identity, clientID string) string {
	return cmp.Or(identity, clientID)
}

// subscribeDurable serves subscribe with durable: true. A pattern the
// owner holds durably already is made its again, and its held messages
// delivered (resume); a new one is made as any subscription and
// recorded, committed before the answer.
func (c *conn) subscribeDurable(topic string, pattern *protocol.Pattern, policy protocol.Policy, fallback bool) error {
	s := c.server
	d := s.durables
	c.mu.Lock()
	access, identity, clientID, maxPending := c.access, c.identity, c.clientID, c.maxPending
	c.mu.Unlock()
	if access != nil && !access.Durable() {
		return c.refuse(refuseDurable, identity, clientID, topic,
			protocol.Errorf(protocol.ErrForbidden, "credential %q may not hold a durable subscription (its grant needs durable: true)", identity))
	}
	if !d.enabled() {
		return protocol.Errorf(protocol.ErrInvalidParams, "this bus keeps no durable subscriptions (its store cannot); subscribe without durable")
	}
	d.mu.Lock()
	o := d.owners[clientID]
	var resumed, elsewhere bool
	if o != nil {
		if _, ok := o.away.subs[topic]; ok {
			resumed = true
		}
		if e := o.shared[topic]; !resumed && e != nil && !e.deleted && e.sub.Node != "" && e.sub.Node != s.cl.self {
			elsewhere = true
		}
	}
	d.mu.Unlock()
	if elsewhere {
		var err error
		if resumed, err = d.awaitAway(clientID, topic); err != nil {
			return err
		}
	}
	if resumed {
		return c.resume(topic)
	}
	c.mu.Lock()
	held := c.subs[topic]
	already := held != nil && held.durable
	c.mu.Unlock()
	if already {
		return nil
	}
	if err := c.checkDurableCount(identity, clientID); err != nil {
		return err
	}
	sub, clientID, identity, err := c.addSubscription(topic, pattern, policy, fallback)
	if err != nil {
		return err
	}
	c.mu.Lock()
	sub.durable = true
	c.mu.Unlock()
	if err := c.shareSubscription(sub, clientID, identity); err != nil {
		return err
	}
	rec := store.DurableSubscription{Pattern: topic, Policy: string(policy), Fallback: fallback, Created: time.Now().UTC()}
	err = d.record(clientID, identity, maxPending, c, func(r *store.DurableOwner) {
		// One record per pattern, whatever the stored record had.
		r.Subscriptions = slices.DeleteFunc(r.Subscriptions, func(sub store.DurableSubscription) bool { return sub.Pattern == topic })
		r.Subscriptions = append(r.Subscriptions, rec)
	})
	if err != nil {
		if gone, _, _ := c.removeSubscription(topic); gone != nil {
			s.cl.unshareNow(gone)
		}
		return protocol.Errorf(protocol.ErrInternal, "subscribe %q: the durable subscription was not stored: %v", topic, err)
	}
	if d.shared == nil {
		// A cluster's counts follow the records (setRecLocked).
		d.mu.Lock()
		d.counts[limitKey(identity, clientID)]++
		d.gauge.Inc()
		d.mu.Unlock()
	}
	return nil
}

// checkDurableCount refuses a durable subscription beyond
// MaxDurablePerIdentity.
func (c *conn) checkDurableCount(identity, clientID string) error {
	d := c.server.durables
	bound := c.server.limits().MaxDurablePerIdentity
	d.mu.Lock()
	n := d.counts[limitKey(identity, clientID)]
	d.mu.Unlock()
	if under(n, bound) {
		return nil
	}
	return c.server.limitReached(limitDurablePerIdentity, "identity %q holds %d durable subscriptions; unsubscribe one first", limitKey(identity, clientID), n)
}

// record changes clientID's owner record with change and stores it,
// making the owner if it has none; conn, when set, is the owner's
// connection from now on.
func (d *durables) record(clientID, identity string, maxPending int, conn *conn, change func(*store.DurableOwner)) error {
	d.mu.Lock()
	o := d.ownerLocked(clientID, identity)
	d.mu.Unlock()
	o.writeMu.Lock()
	defer o.writeMu.Unlock()
	if d.shared != nil {
		return d.recordShared(o, identity, maxPending, conn, change)
	}
	d.mu.Lock()
	rec := o.rec
	rec.Subscriptions = slices.Clone(rec.Subscriptions)
	if identity != "" {
		rec.Identity = identity
	}
	if conn != nil {
		rec.MaxPending = maxPending
	}
	change(&rec)
	d.mu.Unlock()
	err := d.local.PutDurable(&rec)
	d.mu.Lock()
	defer d.mu.Unlock()
	if err != nil {
		d.forgetIfEmptyLocked(o)
		return err
	}
	o.rec = rec
	if conn != nil {
		o.conn = conn
		o.away.mu.Lock()
		o.away.identity, o.away.maxPending = rec.Identity, rec.MaxPending
		o.away.mu.Unlock()
	}
	d.forgetIfEmptyLocked(o)
	return nil
}

// forgetIfEmptyLocked drops an owner left with nothing to keep; d.mu is
// held.
func (d *durables) forgetIfEmptyLocked(o *owner) {
	if len(o.rec.Subscriptions) == 0 && o.rec.Waker == "" && len(o.away.subs) == 0 && len(o.pending) == 0 && len(o.shared) == 0 {
		delete(d.owners, o.id)
	}
}

// resume makes the owner's away pattern topic its again on c: the
// subscription is held by c at once (so unsubscribe and retries find
// it), and goes live once its held messages are delivered (drain).
func (c *conn) resume(topic string) error {
	d := c.server.durables
	d.mu.Lock()
	defer d.mu.Unlock()
	c.mu.Lock()
	clientID := c.clientID
	o := d.owners[clientID]
	var away *subscription
	if o != nil {
		away = o.away.subs[topic]
	}
	switch {
	case away == nil:
		c.mu.Unlock()
		return protocol.Errorf(protocol.ErrSubscriptionNotFound, "durable subscription %q of %q was removed meanwhile; subscribe again", topic, clientID)
	case c.closed:
		c.mu.Unlock()
		return protocol.Errorf(protocol.ErrShuttingDown, "connection is closing")
	case c.publishOnly:
		// It does not hold the clientId: another connection may.
		c.mu.Unlock()
		return protocol.Errorf(protocol.ErrInvalidParams, "this connection initialized with publishOnly and cannot subscribe")
	case c.subs[topic] != nil:
		c.mu.Unlock()
		return nil
	}
	// The credential of today must allow what the owner subscribed to.
	if err := c.checkSubscribe(away.pattern, away.fallback); err != nil {
		c.mu.Unlock()
		return err
	}
	if err := c.checkSubscriptions(len(c.subs)); err != nil {
		c.mu.Unlock()
		return err
	}
	sub := &subscription{seq: away.seq, key: away.key, pattern: away.pattern, policy: away.policy, fallback: away.fallback, durable: true, to: c}
	c.subs[topic] = sub
	c.server.metrics.subscriptions.Inc()
	c.mu.Unlock()
	if o.pending == nil || o.conn != c {
		o.pending = make(map[string]*subscription, 1)
	}
	o.pending[topic] = sub
	o.conn = c
	d.startDrainLocked(o)
	return nil
}

// deliverableLocked reports whether messages held for o under pattern
// go to c now: c is o's connection, and holds pattern again (draining or
// live) or no longer at all (they are then dead-lettered); not while the
// pattern is away. d.mu is held.
func (o *owner) deliverableLocked(c *conn, pattern string) bool {
	return o.conn == c && c != nil && (o.pending[pattern] != nil || o.away.subs[pattern] == nil)
}

// startDrainLocked starts delivering o's held messages to its
// connection, unless that is under way; d.mu is held.
func (d *durables) startDrainLocked(o *owner) {
	if o.draining || o.conn == nil {
		return
	}
	o.draining = true
	s := d.server
	c := o.conn
	s.work.Add(1)
	go func() {
		defer s.work.Done()
		d.drain(o, c)
	}()
}

// drain delivers the messages held for o's draining patterns to c, in the
// order they were held, each answered before the next; once none is
// left, the patterns go live. It ends early, leaving what is left held,
// when c goes.
func (d *durables) drain(o *owner, c *conn) {
	s := d.server
	for {
		if d.shared != nil {
			d.pull(o, c)
		}
		batch := s.sched.takeOwner(o.id, func(pattern string) bool { return d.deliverable(o, c, pattern) })
		if len(batch) == 0 {
			over, live := d.finishDrain(o, c)
			if len(live) > 0 {
				// Live here; the other nodes hold no more once they
				// route to c, and what they held just before is taken
				// by the next round.
				d.goLive(o, c, live)
				continue
			}
			if over {
				return
			}
			continue
		}
		for i, p := range batch {
			if !d.deliverHeld(p, c) {
				for _, rest := range batch[i:] {
					s.sched.add(rest)
				}
				d.mu.Lock()
				o.draining = false
				if o.conn != c {
					// Back on another connection already.
					d.startDrainLocked(o)
				}
				d.mu.Unlock()
				return
			}
		}
	}
}

// deliverable is deliverableLocked, locked.
func (d *durables) deliverable(o *owner, c *conn, pattern string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return o.deliverableLocked(c, pattern)
}

// finishDrain makes o's draining patterns live on c, in the router in one
// step each, and reports whether the drain is over: not when a message
// was held for them since the drain last looked. On a cluster it returns
// the patterns that went live, for the drain to write to the order
// (goLive) and look once more.
func (d *durables) finishDrain(o *owner, c *conn) (bool, []string) {
	s := d.server
	d.mu.Lock()
	defer d.mu.Unlock()
	if o.conn == c && s.sched.countOwner(o.id, func(p string) bool { return o.deliverableLocked(c, p) }) > 0 {
		return false, nil
	}
	if o.conn != c {
		o.draining = false
		d.startDrainLocked(o)
		return true, nil
	}
	var live []string
	for topic, sub := range o.pending {
		if away := o.away.subs[topic]; away != nil {
			s.router.replace(away, sub)
			o.away.mu.Lock()
			delete(o.away.subs, topic)
			o.away.mu.Unlock()
			live = append(live, topic)
		}
	}
	o.pending = nil
	if d.shared != nil && len(live) > 0 {
		return false, live // still draining
	}
	o.draining = false
	return true, nil
}

// deliverHeld delivers one held message to its owner's connection c and
// settles it as a retry attempt would; it reports false, leaving the
// message held, when c is gone.
func (d *durables) deliverHeld(p *store.Pending, c *conn) bool {
	s := d.server
	if !d.loadHeld(p) {
		return true
	}
	pattern := c.patternFor(p.Subscription, p.Message.Topic)
	if pattern == "" {
		if c.isClosed() {
			return false
		}
		p.Attempts = append(p.Attempts, store.Attempt{At: time.Now(),
			Error: fmt.Sprintf("client %q no longer subscribes to a pattern matching %q", p.ClientID, p.Message.Topic)})
		s.sched.deadLetter(p, protocol.ReasonSubscriberGone)
		return true
	}
	dv := &delivery{Message: &p.Message, ClientID: p.ClientID, Subscription: pattern, Attempt: len(p.Attempts) + 1, to: c}
	r, err := s.pipe.deliver(s.ctx, dv)
	if k := failKind(err); k == failDisconnected || k == failNotSent || c.isClosed() && err != nil {
		return false
	}
	switch {
	case !needsRetry(r, err) && r.Rejected():
		p.Attempts = append(p.Attempts, store.Attempt{At: time.Now(), Error: rejection(r)})
		s.sched.deadLetter(p, protocol.ReasonRejected)
	case !needsRetry(r, err):
		// Processed, or declined as any delivery may be.
		s.sched.forget(p, "drop delivered durable hold")
	default:
		p.Kind = store.KindRetry
		s.metrics.retriesScheduled.Inc()
		s.sched.retryOrDeadLetter(p, r, err)
	}
	return true
}

// holdForOwner stores m for the away owner a, the ack's subscriber, and
// asks its waker to start it. It counts against the owner's caps: one
// whose caps are full has the message dead-lettered at once.
func (d *durables) holdForOwner(m *store.Message, a *absent, ack *protocol.Ack) {
	s := d.server
	ack.Error = ""
	identity, refused := s.limitState.retryRoom(a)
	now := time.Now()
	p := &store.Pending{Kind: store.KindDurable, Message: *m, ClientID: ack.ClientID, Subscription: ack.Subscription,
		Subscriber: identity, NextAt: now.Add(s.opts.HoldLifetime)}
	if refused != "" {
		p.Attempts = []store.Attempt{{At: now, Error: refused}}
		ack.Error = refused
		if ack.DeadLetter = s.sched.deadLetter(p, protocol.ReasonMaxRetries); ack.DeadLetter == "" {
			ack.Error = joinErrors(ack.Error, notDeadLettered)
		}
		return
	}
	if err := s.store.PutPending(p); err != nil {
		s.log.Error("could not store a message held for an away durable subscriber; keeping it in memory", "message_id", m.ID, "client", ack.ClientID, "err", err)
		ack.Error = "held in memory only, not stored: " + err.Error()
	}
	ack.Held, ack.NextAttempt = true, p.NextAt.UTC().Format(time.RFC3339Nano)
	s.sched.add(p)
	d.held(a.owner, ack.Subscription)
}

// holdRetry holds a retry whose subscriber is an away owner: it waits
// for the owner, not on the retry schedule.
func (d *durables) holdRetry(p *store.Pending, a *absent) {
	s := d.server
	p.Kind = store.KindDurable
	if p.Subscriber == "" {
		// Stored before retries named their subscriber.
		a.mu.Lock()
		p.Subscriber = a.limitKeyLocked()
		a.mu.Unlock()
	}
	p.NextAt = time.Now().Add(s.opts.HoldLifetime)
	s.sched.storeOp("hold retry for away owner", func() error { return s.store.PutPending(p) })
	s.sched.add(p)
	d.held(a.owner, p.Subscription)
}

// held follows a message held for o: a drain under way takes it; an
// owner that is away is woken, when it has a waker and was not asked
// lately.
func (d *durables) held(o *owner, pattern string) {
	s := d.server
	s.mu.Lock()
	c := s.clients[o.id]
	s.mu.Unlock()
	// A connection closing here has left its durable subscriptions
	// away already, before it leaves s.clients (close, cleanup).
	connected := c != nil && !c.isClosed()
	// Or on another node of the cluster: a stand-in whose connection
	// has left is not, though its node's removal of its regular
	// subscriptions may not have come yet. Taken for connected, an
	// away owner would not be woken, and its messages held until their
	// lifetime ends.
	connected = connected || slices.ContainsFunc(s.cl.remoteStandIns(o.id), (*standIn).connected)
	d.mu.Lock()
	if d.livedElsewhereLocked(o, pattern) {
		// Back on another node since the walk routed here.
		d.mu.Unlock()
		d.forward(o)
		return
	}
	d.startDrainLocked(o)
	waker := o.rec.Waker
	now := time.Since(wakeEpoch)
	wake := !connected && waker != "" && (o.woke == 0 || now-o.woke >= rewakeAfter)
	if wake {
		o.woke = max(now, 1)
	}
	identity := o.rec.Identity
	d.mu.Unlock()
	if !wake {
		return
	}
	d.wakes.Inc()
	s.events.emit(protocol.TopicClientWake, protocol.ClientEvent{
		Type: protocol.TypeClientEvent, Event: protocol.EventWake, ClientID: o.id, Identity: identity,
		Pattern: pattern, Reason: protocol.ReasonWakeMessage, Waker: waker, Node: s.cl.self,
		Timestamp: time.Now().UTC().Format(time.RFC3339Nano),
	})
}

// attemptDurable runs a message held for an away owner when its hold
// lifetime ends: dead-lettered, unless the owner is back, whose drain
// takes it.
func (d *durables) attemptDurable(p *store.Pending) {
	s := d.server
	d.mu.Lock()
	o := d.owners[p.ClientID]
	back := o != nil && o.deliverableLocked(o.conn, p.Subscription)
	elsewhere := o != nil && d.livedElsewhereLocked(o, p.Subscription)
	d.mu.Unlock()
	if elsewhere {
		// Back on another node: sent on there.
		d.sendOn(p)
		return
	}
	if back {
		// Its drain takes it.
		p.NextAt = time.Now().Add(s.opts.RetryBaseDelay)
		s.sched.add(p)
		d.mu.Lock()
		d.startDrainLocked(o)
		d.mu.Unlock()
		return
	}
	if !s.sched.loadMessage(p) {
		return
	}
	p.Attempts = append(p.Attempts, store.Attempt{At: time.Now(),
		Error: fmt.Sprintf("hold lifetime of %s ended while client %q was away", s.opts.HoldLifetime, p.ClientID)})
	s.sched.deadLetter(p, protocol.ReasonSubscriberGone)
}

// leaveDurable turns the durable subscriptions among subs, which c held
// until it closed, away: in the router in one step each, so that no
// message misses them.
func (d *durables) leaveDurable(c *conn, subs map[string]*subscription) {
	var durable bool
	for _, sub := range subs {
		durable = durable || sub.durable
	}
	if !durable {
		return
	}
	s := d.server
	d.mu.Lock()
	defer d.mu.Unlock()
	clientID := c.id()
	o := d.owners[clientID]
	if o == nil || o.conn != c {
		return
	}
	o.conn = nil
	revs := make(map[string]uint64)
	defer d.goAway(revs)
	for topic, sub := range subs {
		if !sub.durable {
			continue
		}
		if o.pending[topic] == sub {
			delete(o.pending, topic)
			continue
		}
		if o.away.subs[topic] != nil {
			continue // away already: the cluster made it so
		}
		if d.shared != nil {
			e := o.shared[topic]
			mine := e != nil && !e.deleted && e.sub.Node == s.cl.self && e.sub.Conn == c.cid
			if e == nil || e.deleted || e.sub.Node != "" && !mine {
				continue // held by another connection since
			}
			if mine {
				e.sub.Node, e.sub.Conn = "", 0
				revs[e.key] = e.rev
			}
			// Else still away in the order: c went before goLive wrote
			// it live, which then writes it away again.
		}
		away := &subscription{seq: sub.seq, key: sub.key, pattern: sub.pattern, policy: sub.policy, fallback: sub.fallback, to: o.away}
		o.away.mu.Lock()
		o.away.subs[topic] = away
		o.away.mu.Unlock()
		s.router.replace(sub, away)
	}
	o.pending = nil
}

// unsubscribeDurable ends the durable subscription topic of clientID,
// which its connection no longer holds, or, away, its stand-in: the
// record goes. Messages held for it stay until the owner is back (and
// then are dead-lettered as subscriber_gone) or their lifetime ends.
func (d *durables) unsubscribeDurable(clientID, topic string) (bool, error) {
	d.mu.Lock()
	o := d.owners[clientID]
	if o == nil || !slices.ContainsFunc(o.rec.Subscriptions, func(sub store.DurableSubscription) bool { return sub.Pattern == topic }) {
		d.mu.Unlock()
		return false, nil
	}
	if away := o.away.subs[topic]; away != nil {
		d.server.router.remove(away)
		o.away.mu.Lock()
		delete(o.away.subs, topic)
		o.away.mu.Unlock()
	}
	delete(o.pending, topic)
	if identity := o.rec.Identity; d.shared == nil {
		// A cluster's counts follow the records (setRecLocked).
		d.counts[limitKey(identity, clientID)]--
		if d.counts[limitKey(identity, clientID)] <= 0 {
			delete(d.counts, limitKey(identity, clientID))
		}
		d.gauge.Dec()
	}
	var key string
	if e := o.shared[topic]; e != nil && !e.deleted {
		key = e.key
	}
	d.mu.Unlock()
	if key != "" {
		d.unshareDurable(key)
	}
	err := d.record(clientID, "", 0, nil, func(r *store.DurableOwner) {
		r.Subscriptions = slices.DeleteFunc(r.Subscriptions, func(sub store.DurableSubscription) bool { return sub.Pattern == topic })
	})
	return true, err
}

// unshareDurable removes a durable subscription from the cluster's order,
// wherever its owner is, and waits until every live node has applied
// that.
func (d *durables) unshareDurable(key string) {
	s := d.server
	ctx, cancel := context.WithTimeout(s.ctx, clusterWriteTimeout)
	defer cancel()
	rev, err := s.cl.cluster.DeleteSubscription(ctx, key)
	if err != nil {
		s.log.Error("cluster: could not remove a durable subscription from the order; the other nodes hold messages for it until their hold lifetime", "key", key, "err", err)
		return
	}
	d.deletedShared(key, rev)
	if err := s.cl.cluster.Sync(ctx, rev); err != nil {
		s.log.Debug("cluster: durable unsubscribe not confirmed by every node in time", "key", key, "err", err)
	}
}

// replace puts next in old's place in one step, so that no routing
// misses the subscription in between.
func (r *router) replace(old, next *subscription) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.removeLocked(old)
	r.insertLocked(next)
}

// swap is replace where old may be nil (next is then inserted) and next
// may be nil (old is then removed).
func (r *router) swap(old, next *subscription) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if old != nil {
		r.removeLocked(old)
	}
	if next != nil {
		r.insertLocked(next)
	}
}

// indexOwner adds e, a message held for an away owner, to its owner's;
// q.mu is held.
func (q *scheduler) indexOwner(e *scheduled) {
	set := q.owners[e.p.ClientID]
	if set == nil {
		set = make(map[*scheduled]struct{})
		q.owners[e.p.ClientID] = set
	}
	set[e] = struct{}{}
}

// unindexOwner removes e from its owner's; q.mu is held.
func (q *scheduler) unindexOwner(e *scheduled) {
	set := q.owners[e.p.ClientID]
	delete(set, e)
	if len(set) == 0 {
		delete(q.owners, e.p.ClientID)
	}
}

// takeOwner takes off the queue the messages held for clientID under the
// patterns pick accepts, in the order they were held (store id).
func (q *scheduler) takeOwner(clientID string, pick func(pattern string) bool) []*store.Pending {
	q.mu.Lock()
	var taken []*scheduled
	for e := range q.owners[clientID] {
		taken = append(taken, e)
	}
	q.mu.Unlock()
	// pick takes durables.mu, which comes before q.mu.
	taken = slices.DeleteFunc(taken, func(e *scheduled) bool { return !pick(e.p.Subscription) })
	q.mu.Lock()
	defer q.mu.Unlock()
	out := make([]*store.Pending, 0, len(taken))
	for _, e := range taken {
		if e.index < 0 {
			continue // started meanwhile (its lifetime ended)
		}
		heap.Remove(&q.queue, e.index)
		q.unindexOwner(e)
		out = append(out, e.p)
	}
	holdOrder(out)
	return out
}

// holdsFor reports whether the queue holds the message id for clientID,
// an owner of durable subscriptions.
func (q *scheduler) holdsFor(clientID, id string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for e := range q.owners[clientID] {
		if e.p.ID == id {
			return true
		}
	}
	return false
}

// countOwner counts the messages held for clientID under the patterns
// pick accepts; the caller may hold durables.mu.
func (q *scheduler) countOwner(clientID string, pick func(pattern string) bool) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	for e := range q.owners[clientID] {
		if pick(e.p.Subscription) {
			n++
		}
	}
	return n
}
