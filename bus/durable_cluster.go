package bus

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/protocol"
)

// Durable subscriptions on a cluster (docs/CLUSTER.md, "Durable
// subscriptions"). What one node keeps in its store, the nodes share:
//
//   - the owners' records are in the cluster's store, changed by
//     compare-and-set (UpdateDurable), and every node follows them
//     (WatchDurable): list, remove, limits and wakers see the cluster's;
//   - each subscription is in the cluster's order under a key of its
//     owner's (PutDurableSubscription), which names the connection
//     holding it, or none while the owner is away, and keeps its place
//     in the order (Order) as it moves: every node routes to the
//     owner's connection, on whichever node, or to its absent stand-in
//     here, which holds the message for it on this node (holdForOwner);
//   - the node the owner comes back to moves the messages other nodes
//     hold for it to itself (TakeHeld), delivers them with its own, oldest
//     first, and only then writes the subscription live; messages other
//     nodes held in the moment before they saw that are moved by its next
//     look (drain), or sent on as retries by the node that holds them
//     (forward), whichever comes first: each is delivered once;
//   - a node that dies leaves its owners' subscriptions away, not gone
//     (nodeDown), and its held messages are taken over with the rest of
//     its pending work.

// SharedDurables is the store of a cluster, which keeps the owners'
// records and the held messages of every node (ClusterStores.Durables).
type SharedDurables interface {
	// UpdateDurable applies change to clientID's record as the cluster
	// has it, and stores it; it returns the record and its revision.
	UpdateDurable(clientID string, change func(*store.DurableOwner)) (*store.DurableOwner, uint64, error)
	// WatchDurable applies every record, then every change, of any node.
	WatchDurable(ctx context.Context, apply func(clientID string, o *store.DurableOwner, rev uint64)) error
	// TakeHeld moves the messages other nodes hold for clientID under
	// the patterns pick accepts to this node.
	TakeHeld(ctx context.Context, clientID string, pick func(pattern string) bool) ([]*store.Pending, error)
	// HeldCount is how many messages the cluster holds for clientID.
	HeldCount(clientID string) int
	// TakeBack moves p, held here, back from the node that took it over
	// while this node was presumed dead.
	TakeBack(ctx context.Context, p *store.Pending) (bool, error)
}

// sharedEntry is a durable subscription in the cluster's order, as this
// node last applied or wrote it. Guarded by durables.mu.
type sharedEntry struct {
	key string
	// sub names the connection holding it, Node "" while away.
	sub SharedSubscription
	// rev is the revision of its last change, seq its place in the
	// order.
	rev, seq uint64
	// deleted marks a removal this node wrote, until the watch brings
	// it.
	deleted bool
}

// awayWait bounds how long a durable subscribe waits for the owner's
// connection on another node, which its claim has just taken over, to
// leave the subscription.
const awayWait = 10 * time.Second

// enabled reports whether the bus keeps durable subscriptions.
func (d *durables) enabled() bool { return d.local != nil || d.shared != nil }

// applyShared applies a change of a durable subscription in the
// cluster's order, this node's own writes included, in revision order.
func (d *durables) applyShared(ch SubscriptionChange) {
	s := d.server
	d.mu.Lock()
	e := d.entries[ch.Key]
	if e != nil && ch.Revision <= e.rev {
		// This node wrote it, or something later, already.
		if ch.Deleted && e.deleted && ch.Revision == e.rev {
			delete(d.entries, ch.Key)
		}
		d.mu.Unlock()
		return
	}
	if ch.Deleted {
		var c *conn
		var topic string
		if e != nil {
			c, topic = d.dropSharedLocked(e)
		}
		delete(d.entries, ch.Key)
		d.mu.Unlock()
		if c != nil {
			// Removed elsewhere (subscriptions.remove) while its owner
			// is here.
			c.removeSubscription(topic)
		}
		return
	}
	sub := ch.Subscription
	pattern, ok := s.cl.parseRemote(&sub)
	if !ok {
		d.mu.Unlock()
		return
	}
	e = d.entryLocked(ch.Key)
	e.sub, e.rev, e.seq, e.deleted = sub, ch.Revision, cmp.Or(sub.Order, ch.Revision), false
	o := d.ownerLocked(sub.ClientID, sub.Identity)
	o.shareLocked(sub.Pattern, e)
	var gone *conn
	remote := false
	switch sub.Node {
	case "":
		gone = d.awayLocked(o, e, pattern)
	case s.cl.self:
		// This node's write, applied when it was made; a previous run's
		// is turned away by restoreShared.
	default:
		d.remoteLocked(o, e, pattern)
		remote = true
	}
	o.notifyLocked()
	d.mu.Unlock()
	if gone != nil {
		closeGone([]*conn{gone})
	}
	if remote {
		d.forward(o)
		s.sched.wakeHolds(pattern, sub.ClientID)
	}
}

// awayLocked routes e, the subscription of owner o, to o's absent
// stand-in here; it returns o's connection when that held it live here
// (another node made it away, having presumed this one dead). d.mu is
// held.
func (d *durables) awayLocked(o *owner, e *sharedEntry, pattern *protocol.Pattern) *conn {
	s := d.server
	topic := e.sub.Pattern
	o.away.mu.Lock()
	o.away.identity = cmp.Or(e.sub.Identity, o.away.identity)
	o.away.maxPending = e.sub.MaxPending
	o.away.mu.Unlock()
	if o.away.subs[topic] != nil {
		return nil // away here already
	}
	away := &subscription{seq: e.seq, key: e.key, pattern: pattern, policy: e.sub.Policy, fallback: e.sub.Fallback, to: o.away}
	s.cl.mu.Lock()
	old := s.cl.forgetRemoteLocked(e.key)
	s.cl.mu.Unlock()
	if old != nil {
		// Its connection on another node has closed: though that node's
		// removal of the connection's other subscriptions may come after
		// this, the owner is away, and a message held now wakes it (held).
		old.to.(*standIn).leave()
	}
	var gone *conn
	if old == nil && o.conn != nil {
		o.conn.mu.Lock()
		live := o.conn.subs[topic]
		o.conn.mu.Unlock()
		if live != nil {
			old, gone = live, o.conn
		}
	}
	o.away.mu.Lock()
	o.away.subs[topic] = away
	o.away.mu.Unlock()
	s.router.swap(old, away)
	return gone
}

// remoteLocked routes e, the subscription of owner o, to its connection
// on another node, in place of whatever this node routed it to. d.mu is
// held.
func (d *durables) remoteLocked(o *owner, e *sharedEntry, pattern *protocol.Pattern) {
	s := d.server
	topic := e.sub.Pattern
	var old []*subscription
	if a := o.away.subs[topic]; a != nil {
		old = append(old, a)
		o.away.mu.Lock()
		delete(o.away.subs, topic)
		o.away.mu.Unlock()
	}
	delete(o.pending, topic)
	s.cl.mu.Lock()
	if prev := s.cl.forgetRemoteLocked(e.key); prev != nil {
		old = append(old, prev)
	}
	rs := s.cl.putRemoteLocked(e.key, &e.sub, e.seq, pattern)
	s.cl.mu.Unlock()
	if len(old) == 0 {
		s.router.insert(rs)
		return
	}
	s.router.swap(old[0], rs)
	for _, sub := range old[1:] {
		s.router.remove(sub)
	}
}

// dropSharedLocked removes e from wherever this node routes it, and
// returns the owner's connection here, with the pattern, when that held
// it. d.mu is held.
func (d *durables) dropSharedLocked(e *sharedEntry) (*conn, string) {
	s := d.server
	topic := e.sub.Pattern
	s.cl.mu.Lock()
	s.cl.dropRemoteLocked(s, e.key)
	s.cl.mu.Unlock()
	o := d.owners[e.sub.ClientID]
	if o == nil {
		return nil, ""
	}
	if a := o.away.subs[topic]; a != nil && a.key == e.key {
		s.router.remove(a)
		o.away.mu.Lock()
		delete(o.away.subs, topic)
		o.away.mu.Unlock()
	}
	delete(o.pending, topic)
	if o.shared[topic] == e {
		delete(o.shared, topic)
	}
	o.notifyLocked()
	c := o.conn
	d.forgetIfEmptyLocked(o)
	return c, topic
}

// notifyLocked wakes those waiting for a change of o's subscriptions in
// the order (awaitAway). d.mu is held.
func (o *owner) notifyLocked() {
	if o.moved != nil {
		close(o.moved)
		o.moved = nil
	}
}

// awaitAway waits, up to awayWait, while clientID's durable subscription
// to topic is held by a connection on another node: its claim took that
// one over, which leaves it away in a moment. It reports whether the
// subscription is away for this node to resume.
func (d *durables) awaitAway(clientID, topic string) (bool, error) {
	s := d.server
	deadline := time.NewTimer(awayWait)
	defer deadline.Stop()
	for {
		d.mu.Lock()
		o := d.owners[clientID]
		if o == nil {
			d.mu.Unlock()
			return false, nil
		}
		if o.away.subs[topic] != nil {
			d.mu.Unlock()
			return true, nil
		}
		e := o.shared[topic]
		if e == nil || e.deleted || e.sub.Node == "" || e.sub.Node == s.cl.self {
			d.mu.Unlock()
			return false, nil
		}
		node := e.sub.Node
		if o.moved == nil {
			o.moved = make(chan struct{})
		}
		moved := o.moved
		d.mu.Unlock()
		select {
		case <-moved:
		case <-deadline.C:
			return false, protocol.Errorf(protocol.ErrInternal, "durable subscription %q of %q is still held by a connection on node %s; subscribe again once that one closed", topic, clientID, node)
		case <-s.ctx.Done():
			return false, protocol.Errorf(protocol.ErrShuttingDown, "the bus is shutting down")
		}
	}
}

// entryLocked returns the entry key, made if there is none. d.mu is
// held.
func (d *durables) entryLocked(key string) *sharedEntry {
	e := d.entries[key]
	if e == nil {
		e = &sharedEntry{key: key}
		d.entries[key] = e
	}
	return e
}

// wroteShared records a write this node made to the order for a durable
// subscription.
func (d *durables) wroteShared(key string, sub SharedSubscription, rev, seq uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	e := d.entryLocked(key)
	if rev <= e.rev {
		return
	}
	e.sub, e.rev, e.seq, e.deleted = sub, rev, seq, false
	o := d.ownerLocked(sub.ClientID, sub.Identity)
	o.shareLocked(sub.Pattern, e)
	o.notifyLocked()
}

// deletedShared records that this node removed a durable subscription
// from the order at rev.
func (d *durables) deletedShared(key string, rev uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	e := d.entryLocked(key)
	if rev <= e.rev {
		return
	}
	if o := d.owners[e.sub.ClientID]; o != nil && o.shared[e.sub.Pattern] == e {
		delete(o.shared, e.sub.Pattern)
		o.notifyLocked()
	}
	e.rev, e.deleted = rev, true
}

// writeAway writes the durable subscription key away in the order, over
// revision last only: a later change (its owner back on another node)
// stands.
func (d *durables) writeAway(ctx context.Context, key string, last uint64) {
	d.mu.Lock()
	e := d.entries[key]
	if e == nil {
		d.mu.Unlock()
		return
	}
	o := d.ownerLocked(e.sub.ClientID, e.sub.Identity)
	d.mu.Unlock()
	o.writeMu.Lock()
	defer o.writeMu.Unlock()
	d.putAway(ctx, key, last)
}

// putAway is writeAway with the owner's writeMu held.
func (d *durables) putAway(ctx context.Context, key string, last uint64) {
	s := d.server
	d.mu.Lock()
	e := d.entries[key]
	if e == nil || e.deleted || e.rev != last {
		d.mu.Unlock()
		return
	}
	sub, seq := e.sub, e.seq
	d.mu.Unlock()
	sub.Node, sub.Conn, sub.Order, sub.Durable = "", 0, seq, true
	_, rev, err := s.cl.cluster.PutDurableSubscription(ctx, sub, last)
	switch {
	case errors.Is(err, ErrRevisionChanged):
		// Moved on meanwhile: its owner is back somewhere.
		return
	case errors.Is(err, ErrClusterClosed):
		// This node is leaving: the acting node writes it away.
		return
	case err != nil:
		s.log.Error("cluster: could not write a durable subscription away; deliveries to it fail and are retried until its owner is back", "client", sub.ClientID, "pattern", sub.Pattern, "err", err)
		return
	}
	d.wroteShared(key, sub, rev, seq)
}

// goAway writes the entries keys away, at the revisions given, on a
// goroutine Shutdown waits for.
func (d *durables) goAway(revs map[string]uint64) {
	if len(revs) == 0 {
		return
	}
	s := d.server
	s.work.Add(1)
	go func() {
		defer s.work.Done()
		ctx, cancel := context.WithTimeout(context.Background(), clusterWriteTimeout)
		defer cancel()
		for key, rev := range revs {
			d.writeAway(ctx, key, rev)
		}
	}()
}

// goLive writes the durable subscriptions topics of o, just gone live on
// c here, to the order as c's, and waits until every node routes with
// that: from then on no node holds messages for them.
func (d *durables) goLive(o *owner, c *conn, topics []string) {
	s := d.server
	o.writeMu.Lock()
	defer o.writeMu.Unlock()
	c.mu.Lock()
	maxPending := c.maxPending
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(s.ctx, clusterWriteTimeout)
	defer cancel()
	for _, topic := range topics {
		for try := 0; ; try++ {
			d.mu.Lock()
			e := o.shared[topic]
			if e == nil || e.deleted || o.conn != c {
				d.mu.Unlock()
				break
			}
			sub, last, seq := e.sub, e.rev, e.seq
			if o.moved == nil {
				o.moved = make(chan struct{})
			}
			moved := o.moved
			d.mu.Unlock()
			sub.Node, sub.Conn, sub.Order, sub.Durable, sub.MaxPending = s.cl.self, c.cid, seq, true, maxPending
			key, rev, err := s.cl.cluster.PutDurableSubscription(ctx, sub, last)
			if errors.Is(err, ErrRevisionChanged) && try < 3 {
				// A change this node has not applied yet (the away
				// write of a dead node's subscription): once it has.
				select {
				case <-moved:
				case <-time.After(time.Second):
				case <-ctx.Done():
				}
				continue
			}
			if err != nil {
				s.log.Error("cluster: could not write a durable subscription live; other nodes hold its messages until its owner subscribes again", "client", sub.ClientID, "pattern", topic, "err", err)
				break
			}
			d.wroteShared(key, sub, rev, seq)
			d.mu.Lock()
			gone := o.conn != c
			d.mu.Unlock()
			if gone {
				// c closed while the write was under way, and left
				// the subscription away here.
				d.putAway(ctx, key, rev)
				break
			}
			if err := s.cl.cluster.Sync(ctx, rev); err != nil {
				s.log.Debug("cluster: durable subscription live, not confirmed by every node in time", "pattern", topic, "err", err)
			}
			break
		}
	}
}

// loadHeld is loadMessage for a message held here for an owner that came
// back. On a cluster, one another node took over while this node was
// presumed dead (it came back just then) is moved back first, so that it
// is delivered in its place, not after the others.
func (d *durables) loadHeld(p *store.Pending) bool {
	s := d.server
	if shared := d.shared; shared != nil && p.ID != "" {
		err := s.store.LoadMessage(p)
		if err == nil {
			return true
		}
		if errors.Is(err, store.ErrNotFound) {
			if _, err := shared.TakeBack(s.ctx, p); err != nil {
				s.log.Warn("cluster: could not take back a held message another node took over", "id", p.ID, "err", err)
			}
		}
	}
	return s.sched.loadMessage(p)
}

// pull moves the messages other nodes hold for o under the patterns
// draining or live on c to this node's scheduler, for drain.
func (d *durables) pull(o *owner, c *conn) {
	s := d.server
	moved, err := d.shared.TakeHeld(s.ctx, o.id, func(pattern string) bool { return d.deliverable(o, c, pattern) })
	for _, p := range moved {
		// One this node held, taken back from the node that took it
		// over (this node came back just then), may be in the
		// scheduler still, from the store as this node started.
		if !s.sched.holdsFor(o.id, p.ID) {
			s.sched.add(p)
		}
	}
	if err != nil {
		s.log.Warn("cluster: could not take every message other nodes hold for a durable subscriber; its node delivers the rest, and one taken whose old entry stays may come twice", "client", o.id, "taken", len(moved), "err", err)
	}
}

// livedElsewhereLocked reports whether o's durable subscription to
// pattern is held by a connection on another node. d.mu is held.
func (d *durables) livedElsewhereLocked(o *owner, pattern string) bool {
	e := o.shared[pattern]
	return d.shared != nil && o.conn == nil && o.away.subs[pattern] == nil &&
		e != nil && !e.deleted && e.sub.Node != "" && e.sub.Node != d.server.cl.self
}

// forward sends the messages this node holds for o, whose subscriptions
// are live on another node now, on as retries due at once: held in the
// moment before this node saw the owner back, they would otherwise wait
// for their hold lifetime. The owner's node may have moved one already
// (TakeHeld): the write that loses the compare-and-set leaves it alone.
func (d *durables) forward(o *owner) {
	s := d.server
	batch := s.sched.takeOwner(o.id, func(pattern string) bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.livedElsewhereLocked(o, pattern)
	})
	for _, p := range batch {
		d.sendOn(p)
	}
}

// sendOn makes p, held for an owner now live on another node, a retry
// due at once.
func (d *durables) sendOn(p *store.Pending) {
	s := d.server
	// The scheduler keeps no payloads, and the write below stores what
	// p has: read it first.
	if !s.sched.loadMessage(p) {
		return
	}
	p.Kind, p.NextAt = store.KindRetry, time.Now()
	if err := s.store.PutPending(p); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return // its owner's node took it
		}
		s.log.Error("could not store a held message as a retry; keeping it in memory", "id", p.ID, "message_id", p.Message.ID, "err", err)
	}
	s.metrics.retriesScheduled.Inc()
	s.sched.add(p)
}

// nodeDown makes the durable subscriptions a dead node's connections
// held away here; the acting node writes them away in the order.
func (d *durables) nodeDown(node string, acting bool) {
	d.mu.Lock()
	revs, gone := d.awayOfLocked(node)
	d.mu.Unlock()
	closeGone(gone)
	if acting {
		d.goAway(revs)
	}
}

// awayOfLocked makes the durable subscriptions of node's connections
// away here, and returns their keys at the revisions seen, and the
// connections here that held one, for the caller to close once d.mu is
// released. d.mu is held.
func (d *durables) awayOfLocked(node string) (map[string]uint64, []*conn) {
	revs := make(map[string]uint64)
	var gones []*conn
	for key, e := range d.entries {
		if e.deleted || e.sub.Node != node {
			continue
		}
		pattern, err := protocol.ParsePattern(e.sub.Pattern)
		if err != nil {
			continue // never routed (parseRemote)
		}
		o := d.ownerLocked(e.sub.ClientID, e.sub.Identity)
		e.sub.Node, e.sub.Conn = "", 0
		if gone := d.awayLocked(o, e, pattern); gone != nil {
			gones = append(gones, gone)
		}
		revs[key] = e.rev
	}
	return revs, gones
}

// closeGone closes connections whose durable subscriptions the cluster
// made away, this node having been presumed dead: their clients
// subscribe again.
func closeGone(gone []*conn) {
	for _, c := range gone {
		c.log.Warn("closing peer: the cluster made its durable subscription away, this node having been presumed dead", "client", c.id())
		c.close(StatusTryAgainLater, closeRemovedByCluster)
	}
}

// tookOver follows the takeover of a dead node's pending work: the
// messages it held for owners who are back, here or on another node, go
// to them now rather than at the end of their hold lifetime.
func (d *durables) tookOver(moved []*store.Pending) {
	seen := make(map[string]bool)
	for _, p := range moved {
		if p.Kind != store.KindDurable || seen[p.ClientID] {
			continue
		}
		seen[p.ClientID] = true
		d.mu.Lock()
		o := d.owners[p.ClientID]
		d.mu.Unlock()
		if o != nil {
			d.held(o, p.Subscription)
		}
	}
}

// restoreShared follows the owners' records, and makes the durable
// subscriptions a previous run of this node held away: their
// connections are gone.
func (d *durables) restoreShared(ctx context.Context) error {
	if err := d.shared.WatchDurable(ctx, d.applyRecord); err != nil {
		return err
	}
	d.mu.Lock()
	revs, gone := d.awayOfLocked(d.server.cl.self)
	d.mu.Unlock()
	closeGone(gone)
	wctx, cancel := context.WithTimeout(ctx, clusterWriteTimeout)
	defer cancel()
	for key, rev := range revs {
		d.writeAway(wctx, key, rev)
	}
	return nil
}

// applyRecord applies an owner's record as the cluster has it now; rec
// is nil when it was removed.
func (d *durables) applyRecord(clientID string, rec *store.DurableOwner, rev uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	o := d.owners[clientID]
	if o == nil {
		if rec == nil {
			return
		}
		o = d.ownerLocked(clientID, rec.Identity)
	}
	if rev <= o.recRev {
		return
	}
	if rec == nil {
		rec = &store.DurableOwner{ClientID: clientID, Identity: o.rec.Identity}
	}
	d.setRecLocked(o, rec, rev)
	d.forgetIfEmptyLocked(o)
}

// setRecLocked makes rec, at revision rev, o's record, and counts its
// subscriptions. d.mu is held.
func (d *durables) setRecLocked(o *owner, rec *store.DurableOwner, rev uint64) {
	before, after := len(o.rec.Subscriptions), len(rec.Subscriptions)
	if key := limitKey(o.rec.Identity, o.id); before > 0 {
		if d.counts[key] -= before; d.counts[key] <= 0 {
			delete(d.counts, key)
		}
	}
	if after > 0 {
		d.counts[limitKey(rec.Identity, rec.ClientID)] += after
	}
	d.gauge.Add(float64(after - before))
	o.rec, o.recRev = *rec, rev
	o.rec.Subscriptions = slices.Clone(rec.Subscriptions)
	o.away.mu.Lock()
	o.away.identity, o.away.maxPending = cmp.Or(rec.Identity, o.away.identity), rec.MaxPending
	o.away.mu.Unlock()
}

// recordShared is record on a cluster: the change is made to the record
// as the cluster has it, by compare-and-set.
func (d *durables) recordShared(o *owner, identity string, maxPending int, conn *conn, change func(*store.DurableOwner)) error {
	rec, rev, err := d.shared.UpdateDurable(o.id, func(r *store.DurableOwner) {
		if identity != "" {
			r.Identity = identity
		}
		if conn != nil {
			r.MaxPending = maxPending
		}
		change(r)
	})
	d.mu.Lock()
	defer d.mu.Unlock()
	if err != nil {
		d.forgetIfEmptyLocked(o)
		return err
	}
	if rev > o.recRev {
		d.setRecLocked(o, rec, rev)
	}
	if conn != nil {
		o.conn = conn
	}
	d.forgetIfEmptyLocked(o)
	return nil
}

// holdOrder sorts messages held for one owner oldest first: by id among
// those one node held (its ids grow), and the nodes' runs merged by
// publication time, so that each publisher's messages keep their order.
func holdOrder(ps []*store.Pending) {
	node := func(id string) string { return id[:strings.LastIndexByte(id, '-')+1] }
	slices.SortFunc(ps, func(a, b *store.Pending) int {
		return cmp.Or(strings.Compare(node(a.ID), node(b.ID)), cmp.Compare(len(a.ID), len(b.ID)), cmp.Compare(a.ID, b.ID))
	})
	var runs [][]*store.Pending
	for i := 0; i < len(ps); {
		j := i + 1
		for j < len(ps) && node(ps[j].ID) == node(ps[i].ID) {
			j++
		}
		runs = append(runs, ps[i:j])
		i = j
	}
	if len(runs) < 2 {
		return
	}
	merged := make([]*store.Pending, 0, len(ps))
	for len(merged) < len(ps) {
		best := -1
		for i, r := range runs {
			if len(r) > 0 && (best < 0 || r[0].Message.PublishedAt.Before(runs[best][0].Message.PublishedAt)) {
				best = i
			}
		}
		merged = append(merged, runs[best][0])
		runs[best] = runs[best][1:]
	}
	copy(ps, merged)
}
