package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bub-bus/bub/protocol"
)

// Subscription is one subscribe call as the cluster records it in
// BUB_SUBS: which node's connection holds which pattern, and what the
// router needs to place and deliver it.
type Subscription struct {
	Node     string          `json:"node"`
	Conn     uint64          `json:"conn"`
	Pattern  string          `json:"pattern"`
	Policy   protocol.Policy `json:"policy,omitempty"`
	Fallback bool            `json:"fallback,omitempty"`
	ClientID string          `json:"clientId"`
	Identity string          `json:"identity,omitempty"`
	// MaxPending is the cap of the subscriber's grant on its identity's
	// pending entries, 0 for the bus's.
	MaxPending int `json:"maxPending,omitempty"`
	// Durable marks a durable subscription (PutDurableSubscription): its
	// key is its owner's, and Node is "" while the owner is away.
	Durable bool `json:"durable,omitempty"`
	// Order is a durable subscription's place in the order, the revision
	// of its first put, which later puts (its owner leaving, coming
	// back on another node) keep; 0 on the first put.
	Order uint64 `json:"order,omitempty"`
}

// storedSubscription is a BUB_SUBS value: the subscription, and the run
// of Node that wrote it (Node.run) when it is a connection's, so that
// the node acting for a previous run, presumed dead, leaves it alone.
type storedSubscription struct {
	Subscription
	Run string `json:"run,omitempty"`
}

// SubscriptionChange is one change of the subscription order, as every
// node applies it.
type SubscriptionChange struct {
	// Key names the subscription in BUB_SUBS: a put and the later delete
	// of one subscription carry the same key.
	Key string
	// Revision is the change's place in the one order: a later subscribe
	// has a higher revision and so wins.
	Revision uint64
	// Deleted is set for an unsubscribe; Subscription then has only Node
	// and Conn, read from the key.
	Deleted      bool
	Subscription Subscription
}

// SubscriptionKey is <node>.<conn>.<pattern hash>: one key per
// connection and pattern, so a subscribe again of the same pattern by
// the same connection replaces its entry (and moves it to the end of the
// order), and the node's keys share a prefix. Patterns hold characters
// keys may not, hence the hash; 64 bits make a collision between two
// patterns of one connection negligible.
func SubscriptionKey(node string, conn uint64, pattern string) string {
	h := fnv.New64a()
	h.Write([]byte(pattern))
	return node + "." + strconv.FormatUint(conn, 10) + "." + strconv.FormatUint(h.Sum64(), 16)
}

// durableKeyPrefix starts the keys of durable subscriptions: "=" is no
// character of a node id, so no node's keys share it.
const durableKeyPrefix = "=durable."

// DurableKey is the key of clientID's durable subscription to pattern:
// the owner's, not a connection's, so that it outlives the connections
// and the nodes that hold it.
func DurableKey(clientID, pattern string) string {
	h := fnv.New64a()
	h.Write([]byte(pattern))
	return durableKeyPrefix + clientKey(clientID) + "." + strconv.FormatUint(h.Sum64(), 16)
}

// PutDurableSubscription records a durable subscription under its
// owner's key (DurableKey), Node and Conn as given: a connection of this
// node, or Node "" while the owner is away. last > 0 writes only over
// that revision: a write based on what another node replaced since fails
// with ErrRevisionChanged, and writes nothing. Like every write of the
// order it waits out a JetStream election (publishKV): a durable
// subscription written away while a node dies must not be lost to one.
func (n *Node) PutDurableSubscription(ctx context.Context, s Subscription, last uint64) (key string, rev uint64, err error) {
	key = DurableKey(s.ClientID, s.Pattern)
	s.Durable = true
	over := uint64(anyRevision)
	if last > 0 {
		over = last
	}
	rev, err = n.putSubscription(ctx, key, &s, over)
	if isWrongRevision(err) {
		err = ErrRevisionChanged
	}
	if err != nil {
		return key, 0, fmt.Errorf("cluster: put durable subscription %q of %q: %w", s.Pattern, s.ClientID, err)
	}
	return key, rev, nil
}

// putSubscription writes s under key in BUB_SUBS, over revision over
// (publishKV), once this node has a quorum.
func (n *Node) putSubscription(ctx context.Context, key string, s *Subscription, over uint64) (uint64, error) {
	if n.closed.Load() {
		return 0, ErrClosed
	}
	stored := storedSubscription{Subscription: *s}
	if s.Node == n.id && !s.Durable {
		stored.Run = n.run
	}
	value, err := json.Marshal(stored)
	if err != nil {
		return 0, err
	}
	if err := n.quorum(); err != nil {
		return 0, err
	}
	rev, err := n.putKey(ctx, bucketSubs, key, value, over)
	if err != nil && !isWrongRevision(err) {
		return 0, n.explain(err)
	}
	return rev, err
}

// parseSubscriptionKey reads node and conn back from a key.
func parseSubscriptionKey(key string) (node string, conn uint64, ok bool) {
	node, rest, ok1 := strings.Cut(key, ".")
	connStr, _, ok2 := strings.Cut(rest, ".")
	conn, err := strconv.ParseUint(connStr, 10, 64)
	return node, conn, ok1 && ok2 && err == nil
}

// PutSubscription records a subscription of one of this node's
// connections (Node is set to this node) and returns its revision, once
// a majority of BUB_SUBS's replicas has it. Call Sync with the revision
// before answering the subscriber, so every node routes with it.
func (n *Node) PutSubscription(ctx context.Context, s Subscription) (uint64, error) {
	s.Node = n.id
	rev, err := n.putSubscription(ctx, SubscriptionKey(n.id, s.Conn, s.Pattern), &s, anyRevision)
	if err != nil {
		return 0, fmt.Errorf("cluster: put subscription %q of conn %d: %w", s.Pattern, s.Conn, err)
	}
	return rev, nil
}

// DeleteSubscription removes a subscription of one of this node's
// connections and returns the revision of the removal, for Sync.
func (n *Node) DeleteSubscription(ctx context.Context, conn uint64, pattern string) (uint64, error) {
	rev, err := n.deleteSubscription(ctx, SubscriptionKey(n.id, conn, pattern))
	if err != nil {
		return 0, fmt.Errorf("cluster: delete subscription %q of conn %d: %w", pattern, conn, err)
	}
	return rev, nil
}

// deleteSubscription removes the subscription key names.
func (n *Node) deleteSubscription(ctx context.Context, key string) (uint64, error) {
	if n.closed.Load() {
		return 0, ErrClosed
	}
	if err := n.quorum(); err != nil {
		return 0, err
	}
	rev, err := n.deleteKey(ctx, bucketSubs, key, anyRevision)
	if err != nil {
		return 0, n.explain(err)
	}
	return rev, nil
}

// subscriptionOrder is the node's side of the order: how far its watcher
// has applied BUB_SUBS, and the sync requests waiting for it to get
// further.
type subscriptionOrder struct {
	// mu guards the fields below.
	mu      sync.Mutex
	applied uint64
	waiters []syncWaiter
}

// startSubscriptionWatch starts the goroutine applying BUB_SUBS to
// ApplySubscription and returns once the current subscriptions are
// applied.
func (n *Node) startSubscriptionWatch(ctx context.Context) error {
	return n.startWatch(ctx, n.subs, bucketSubs, false, n.applySubscription)
}

// applySubscription hands one entry to ApplySubscription and answers the
// sync requests it satisfies. Deletes among the initial values are
// skipped: they remove what a starting node never saw.
func (n *Node) applySubscription(e jetstream.KeyValueEntry, initial bool) {
	change := SubscriptionChange{Key: e.Key(), Revision: e.Revision()}
	apply := true
	switch e.Operation() {
	case jetstream.KeyValuePut:
		if err := json.Unmarshal(e.Value(), &change.Subscription); err != nil {
			// Only nodes write here; a record that does not parse is a
			// bug or a foreign writer, and routing by half of it is
			// worse than not routing to it.
			n.log.Error("cluster: unreadable subscription record skipped", "key", e.Key(), "revision", e.Revision(), "err", err)
			apply = false
		}
	default:
		change.Deleted = true
		node, conn, ok := parseSubscriptionKey(e.Key())
		change.Subscription.Node, change.Subscription.Conn = node, conn
		if strings.HasPrefix(e.Key(), durableKeyPrefix) {
			change.Subscription = Subscription{Durable: true}
			ok = true
		}
		apply = ok && !initial
	}
	if apply {
		n.handler.ApplySubscription(change)
	}
	n.advance(e.Revision())
}

// syncSubject is where a node asks every node to confirm a revision.
const syncSubject = "bub.sync"

// syncWaiter is a sync request this node answers once it has applied rev.
type syncWaiter struct {
	rev   uint64
	reply string
	since time.Time
}

// advance records that the watcher applied rev and answers the waiters
// it satisfies.
func (n *Node) advance(rev uint64) {
	o := &n.order
	o.mu.Lock()
	defer o.mu.Unlock()
	o.applied = max(o.applied, rev)
	kept := o.waiters[:0]
	for _, w := range o.waiters {
		if w.rev <= o.applied {
			// A failed publish (NATS gone) is the requester's timeout.
			_ = n.nc.Publish(w.reply, []byte(n.id))
			continue
		}
		kept = append(kept, w)
	}
	clear(o.waiters[len(kept):])
	o.waiters = kept
}

// handleSync answers a sync request now, or once the watcher gets there.
// Each revision of BUB_SUBS reaches the watcher, or a later one does when
// a write replaced it, so comparing with >= never waits for ever; waiters
// older than the sync timeout are dropped anyway, as their requester gave
// up.
func (n *Node) handleSync(m *nats.Msg) {
	rev, err := strconv.ParseUint(string(m.Data), 10, 64)
	if err != nil || m.Reply == "" {
		n.log.Warn("cluster: malformed sync request ignored", "data", string(m.Data))
		return
	}
	o := &n.order
	o.mu.Lock()
	defer o.mu.Unlock()
	if rev <= o.applied {
		_ = m.Respond([]byte(n.id))
		return
	}
	now := time.Now()
	kept := o.waiters[:0]
	for _, w := range o.waiters {
		if now.Sub(w.since) < n.opts.SyncTimeout {
			kept = append(kept, w)
		}
	}
	clear(o.waiters[len(kept):])
	o.waiters = append(kept, syncWaiter{rev: rev, reply: m.Reply, since: now})
}

// Sync waits until every live node's watcher has applied rev, so that a
// publish accepted anywhere after Sync returns is routed with that
// change. It is bounded by SyncTimeout (and ctx); nodes that did not
// answer in time are named in an ErrSyncTimeout and counted in
// SyncTimeouts: they are presumably dying, and the change stands.
func (n *Node) Sync(ctx context.Context, rev uint64) error {
	if n.closed.Load() {
		return ErrClosed
	}
	ctx, cancel := context.WithTimeout(ctx, n.opts.SyncTimeout)
	defer cancel()
	waiting := make(map[string]bool)
	for _, id := range n.Live() {
		waiting[id] = true
	}
	inbox := nats.NewInbox()
	sub, err := n.nc.SubscribeSync(inbox)
	if err != nil {
		return fmt.Errorf("cluster: sync revision %d: %w", rev, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := n.nc.PublishRequest(syncSubject, inbox, strconv.AppendUint(nil, rev, 10)); err != nil {
		return fmt.Errorf("cluster: sync revision %d: %w", rev, err)
	}
	for len(waiting) > 0 {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			break
		}
		delete(waiting, string(m.Data))
	}
	if len(waiting) == 0 {
		return nil
	}
	n.syncTimeouts.Add(1)
	missing := make([]string, 0, len(waiting))
	for id := range waiting {
		missing = append(missing, id)
	}
	return fmt.Errorf("%w: revision %d: no answer from %s within %v", ErrSyncTimeout, rev, strings.Join(missing, ", "), n.opts.SyncTimeout)
}

// startSyncService answers other nodes' sync requests.
func (n *Node) startSyncService() error {
	s, err := n.nc.Subscribe(syncSubject, n.handleSync)
	if err != nil {
		return fmt.Errorf("subscribe %s: %w", syncSubject, err)
	}
	n.natsSubs = append(n.natsSubs, s)
	return nil
}

// currentEntries returns the entries of kv matching filter now (deletes
// excluded), read with a watch that ends at the current values. ctx
// bounds it.
//
// Around a node's death the watch's consumer may not be made at once.
// JetStream refuses the request while it knows it has no leader, and
// ignores it while its servers still take the dead node for the leader:
// that request is never answered. So a refused or unanswered request is
// made again, until ctx ends. A watch once made is not restarted: a
// stream with no leader (its node just died) delivers after the
// election, and restarting a silent read only made it later (a takeover
// that did so every few seconds missed its deadline more often).
func currentEntries(ctx context.Context, kv jetstream.KeyValue, filter string) ([]jetstream.KeyValueEntry, error) {
	for {
		out, err := watchCurrent(ctx, kv, filter)
		if err == nil {
			return out, nil
		}
		if !errors.Is(err, errWatchUnanswered) && !isLeaderless(err) {
			return nil, err
		}
		select {
		case <-time.After(leaderlessPause):
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (tried again until %w)", err, ctx.Err())
		}
	}
}

// watchCurrent is one try of currentEntries. The watch's context must
// outlive the read (the client unsubscribes when it ends), so the bound
// on the request is a timer that cancels it, stopped once the watch is
// made.
func watchCurrent(ctx context.Context, kv jetstream.KeyValue, filter string) ([]jetstream.KeyValueEntry, error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	timer := time.AfterFunc(watchCreateTry, cancel)
	w, err := kv.Watch(wctx, filter, jetstream.IgnoreDeletes())
	late := !timer.Stop() && ctx.Err() == nil
	var out []jetstream.KeyValueEntry
	if err == nil {
		// Late or not, readCurrent stops the watch.
		out, err = readCurrent(wctx, w)
	}
	if late {
		return nil, fmt.Errorf("%w within %v", errWatchUnanswered, watchCreateTry)
	}
	return out, err
}

var errWatchUnanswered = errors.New("no answer to the request for a watch")

// watchCreateTry bounds one request for a watch's consumer: it is made
// in well under a second even on a loaded machine, and a leader election
// takes 4–9 s, so a request unanswered after longer than that was lost.
const watchCreateTry = 10 * time.Second

// leaderlessPause is the wait before asking JetStream again after it
// answered that it has no leader.
const leaderlessPause = 250 * time.Millisecond

// isLeaderless reports whether err is JetStream's refusal while it has
// no leader to serve a request (503: "JetStream system temporarily
// unavailable"), or that no server answered at all: worth asking again
// once a leader is elected.
func isLeaderless(err error) bool {
	var legacy *nats.APIError
	var api *jetstream.APIError
	return errors.Is(err, nats.ErrNoResponders) ||
		errors.As(err, &legacy) && legacy.Code == 503 ||
		errors.As(err, &api) && api.Code == 503
}

// watchAll returns the last entry of every key of kv, deletes included.
func watchAll(ctx context.Context, kv jetstream.KeyValue, opts ...jetstream.WatchOpt) ([]jetstream.KeyValueEntry, error) {
	w, err := kv.WatchAll(ctx, opts...)
	if err != nil {
		return nil, err
	}
	return readCurrent(ctx, w)
}

// readCurrent reads w's current values, up to the nil that ends them,
// and stops it.
func readCurrent(ctx context.Context, w jetstream.KeyWatcher) ([]jetstream.KeyValueEntry, error) {
	defer func() {
		_ = w.Stop()
		// Drain until closed: the watcher's callback may be blocked on
		// the channel and would otherwise never end.
		for range w.Updates() {
		}
	}()
	var out []jetstream.KeyValueEntry
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("watch ended before the current values")
			}
			if e == nil {
				return out, nil
			}
			out = append(out, e)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
