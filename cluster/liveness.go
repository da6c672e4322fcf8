package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bub-bus/bub/protocol"
)

// heartbeatSubject is where node announces itself, every heartbeat
// interval, on core NATS. Liveness is judged from these and not from
// writes to a JetStream bucket: a bucket's watch stalls for seconds while
// its stream elects a new leader, which would make every node look dead
// to every other whenever the leader's node dies.
func heartbeatSubject(node string) string { return "bub.heartbeat." + node }

// Heartbeat payloads: alive, or leaving (Close), which the others handle
// at once instead of after the node timeout.
const (
	beatAlive = "alive"
	beatLeft  = "left"
)

// liveness is the node's view of which nodes are alive. Each node's last
// heartbeat is timed by when this node received it, on this node's
// monotonic clock: clocks of other hosts never enter, so skew cannot make
// a healthy node look dead.
type liveness struct {
	// mu guards the fields below.
	mu sync.Mutex
	// seen holds when each live node's last heartbeat arrived.
	seen map[string]time.Time
	// left are nodes that said they leave, to report on the next check.
	left []string
}

// Live returns the ids of the nodes this node holds live, sorted,
// including itself.
func (n *Node) Live() []string {
	l := &n.liveness
	l.mu.Lock()
	ids := make([]string, 0, len(l.seen)+1)
	for id := range l.seen {
		ids = append(ids, id)
	}
	l.mu.Unlock()
	// seen always holds this node (startLiveness).
	slices.Sort(ids)
	return ids
}

// Acting reports whether this node is the one to act for the cluster
// when a node dies: the live node with the lowest id. Two nodes may
// briefly both believe they act (their views differ for up to a
// heartbeat), so every action taken on it is idempotent.
func (n *Node) Acting() bool {
	return n.Live()[0] == n.id
}

// startLiveness registers the node in BUB_NODES, takes the nodes
// registered there as live until their heartbeats say otherwise, and
// starts the heartbeat. BUB_NODES is the membership a starting node reads
// so that its first Sync waits for everyone; the heartbeats are core
// NATS messages.
func (n *Node) startLiveness(ctx context.Context) error {
	n.liveness.seen = make(map[string]time.Time)
	n.liveness.seen[n.id] = time.Now()
	// A watch, not one read: a node starting at the same moment may
	// register just after the read and send its first heartbeats before
	// this node listens for them, and a node this node never heard of
	// is never presumed dead; with nobody else acting for it, its
	// pending work would wait for it for ever (TestClusterNodeDeath saw
	// exactly that).
	if err := n.startWatch(ctx, n.nodes, bucketNodes, false, n.sawRegistration); err != nil {
		return err
	}
	now := time.Now()
	value, err := json.Marshal(struct {
		Started time.Time `json:"started"`
	}{now.UTC()})
	if err != nil {
		return err
	}
	err = n.retryUntil(ctx, "register in "+bucketNodes, 5*time.Second, 200*time.Millisecond, func(ctx context.Context) error {
		_, err := n.putKey(ctx, bucketNodes, n.id, value, anyRevision)
		return err
	})
	if err != nil {
		return err
	}
	sub, err := n.nc.Subscribe(heartbeatSubject("*"), n.sawHeartbeat)
	if err != nil {
		return fmt.Errorf("subscribe to heartbeats: %w", err)
	}
	n.natsSubs = append(n.natsSubs, sub)
	if err := n.nc.Publish(heartbeatSubject(n.id), []byte(beatAlive)); err != nil {
		return fmt.Errorf("first heartbeat: %w", err)
	}
	n.goFunc(n.heartbeatLoop)
	n.goFunc(n.compactLoop)
	return nil
}

// sawRegistration takes a node registered in BUB_NODES as live, if it
// is new to this node: it gets a full node timeout to show a heartbeat,
// however old its entry, since entry times come from other hosts' clocks.
// A node that registers while this node runs may have restarted (before
// anyone presumed it dead, or after it left and before this node
// handled that): the watches' consumers its previous run hosted went
// with it, and the watches start again (watch.go). A new node costs a
// restart for nothing.
func (n *Node) sawRegistration(e jetstream.KeyValueEntry, initial bool) {
	if e.Operation() != jetstream.KeyValuePut || e.Key() == n.id || !protocol.ValidNodeID(e.Key()) {
		return
	}
	l := &n.liveness
	l.mu.Lock()
	_, known := l.seen[e.Key()]
	if !known {
		n.log.Info("cluster node registered", "peer", e.Key())
		l.seen[e.Key()] = time.Now()
	}
	l.mu.Unlock()
	if !initial {
		n.log.Info("cluster node registered again, or anew", "peer", e.Key(), "was_live", known)
		// Not here: a restart waits for this watch's step to end.
		n.goFunc(n.restartWatches)
	}
}

// sawHeartbeat records another node's heartbeat.
func (n *Node) sawHeartbeat(m *nats.Msg) {
	id := strings.TrimPrefix(m.Subject, heartbeatSubject(""))
	if id == n.id || !protocol.ValidNodeID(id) {
		return
	}
	l := &n.liveness
	l.mu.Lock()
	defer l.mu.Unlock()
	_, known := l.seen[id]
	if string(m.Data) == beatLeft {
		if known {
			delete(l.seen, id)
			l.left = append(l.left, id)
		}
		return
	}
	if !known {
		n.log.Info("cluster node live", "peer", id)
	}
	l.seen[id] = time.Now()
}

// heartbeatLoop announces this node and, at the same pace, looks for
// nodes whose heartbeats stopped.
func (n *Node) heartbeatLoop() {
	t := time.NewTicker(n.opts.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
		// A failed publish (NATS unreachable) needs no handling here:
		// the client reconnects, and the others judge by what arrives.
		if n.closed.Load() {
			// Leaving: an "alive" after Close's "left" would have the
			// others take this node back, and presume it dead later.
			return
		}
		_ = n.nc.Publish(heartbeatSubject(n.id), []byte(beatAlive))
		n.checkNodes()
	}
}

// down is a node this node no longer holds live.
type down struct {
	id string
	// presumed is set when its heartbeats stopped, unset when it left.
	presumed bool
}

// checkNodes presumes dead the nodes whose heartbeat is older than the
// node timeout, and handles them with the nodes that left.
func (n *Node) checkNodes() {
	l := &n.liveness
	now := time.Now()
	l.mu.Lock()
	var gone []down
	for _, id := range l.left {
		if _, back := l.seen[id]; back {
			// It left and started again before this check: its new
			// run removed its old keys and resumes its own pending
			// work; taking that over too would run it twice (the
			// cluster test saw b1 take over 174 messages b3 had just
			// resumed).
			continue
		}
		gone = append(gone, down{id: id})
	}
	l.left = nil
	for id, at := range l.seen {
		if id != n.id && now.Sub(at) > n.opts.NodeTimeout {
			delete(l.seen, id)
			gone = append(gone, down{id: id, presumed: true})
		}
	}
	l.mu.Unlock()
	for _, d := range gone {
		// Off the heartbeat loop: what follows a death waits on
		// JetStream, which may be electing leaders for seconds, and a
		// node that stopped heartbeating meanwhile would be presumed
		// dead in turn.
		n.goFunc(func() { n.nodeDown(d) })
	}
}

// nodeDown handles a node that is no longer live: the acting node removes
// its subscriptions, claims and BUB_NODES entry, then NodeDown hears of
// it. The removals of subscriptions and claims are compare-and-delete on
// the revisions read, so a node that comes back and writes again keeps
// its new entries.
func (n *Node) nodeDown(d down) {
	// Dead or leaving, it may have hosted the watches' consumers
	// (watch.go); the restart does not hold up the takeover.
	n.goFunc(n.restartWatches)
	acting := n.Acting()
	n.log.Warn("cluster node down", "peer", d.id, "presumed_dead", d.presumed, "acting", acting)
	if acting {
		// Alongside NodeDown, which takes the node's pending work over:
		// that is what no message may wait on.
		n.goFunc(func() { n.removeDeadNode(d.id) })
	}
	if n.handler.NodeDown != nil {
		n.handler.NodeDown(d.id, acting)
	}
}

// removeDeadNode deletes a dead node's subscriptions, claims and
// registration, trying again until it succeeds or this node closes:
// every node dropped the dead node's subscriptions from its router
// already, so keys left behind would make the order differ between the
// nodes, even if the node was only stalled and is back (it then sees
// its keys go, closes its connections, and their clients subscribe
// again). Compare-and-delete keeps whatever the node wrote since.
func (n *Node) removeDeadNode(id string) {
	for {
		// Each try bounded, but long enough to outlast a JetStream leader
		// election, which the death of a leader's node starts.
		ctx, cancel := context.WithTimeout(n.ctx, max(n.opts.NodeTimeout, 20*time.Second))
		err := n.removeNodeKeys(ctx, id)
		if err == nil {
			_, err = n.deleteKey(ctx, bucketNodes, id, anyRevision)
		}
		cancel()
		if err == nil || n.ctx.Err() != nil {
			return
		}
		n.log.Error("cluster: removing a dead node's keys failed; trying again", "peer", id, "err", err)
		select {
		case <-time.After(5 * time.Second):
		case <-n.ctx.Done():
			return
		}
	}
}

// removeNodeKeys deletes node's subscriptions from BUB_SUBS and its
// claims from BUB_CLIENTS, each only if unchanged since read.
func (n *Node) removeNodeKeys(ctx context.Context, node string) error {
	subs, err := currentEntries(ctx, n.subs, node+".>")
	if err != nil {
		return fmt.Errorf("list subscriptions of %s: %w", node, err)
	}
	var errs []error
	for _, e := range subs {
		errs = append(errs, n.deleteAt(ctx, n.subs, e))
	}
	clients, err := currentEntries(ctx, n.clients, ">")
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("list clients of %s: %w", node, err))...)
	}
	claimed := 0
	for _, e := range clients {
		var o owner
		if json.Unmarshal(e.Value(), &o) == nil && o.Node == node {
			claimed++
			errs = append(errs, n.deleteAt(ctx, n.clients, e))
		}
	}
	if len(subs)+claimed > 0 {
		n.log.Info("cluster: removed a node's keys", "peer", node, "subscriptions", len(subs), "clients", claimed)
	}
	return errors.Join(errs...)
}

// deleteAt deletes e's key if its revision is still e's.
func (n *Node) deleteAt(ctx context.Context, kv jetstream.KeyValue, e jetstream.KeyValueEntry) error {
	_, err := n.deleteKey(ctx, kv.Bucket(), e.Key(), e.Revision())
	if err != nil && !isWrongRevision(err) {
		return fmt.Errorf("delete %s/%s: %w", kv.Bucket(), e.Key(), err)
	}
	return nil
}

// quorum returns nil when this node hears heartbeats from a majority of
// the cluster's nodes (itself included), and otherwise ErrNoQuorum,
// saying how many it hears. JetStream needs that majority to elect
// leaders and take writes; a node in a minority would only wait for
// answers that cannot come. The cluster's size is the nodes the
// configuration names, or more if more are live. With an external NATS
// the quorum is NATS's own, and this always returns nil, as it does
// before the node's liveness starts.
func (n *Node) quorum() error {
	if n.size == 0 {
		return nil
	}
	l := &n.liveness
	l.mu.Lock()
	live, started := len(l.seen), l.seen != nil
	l.mu.Unlock()
	size := max(n.size, live)
	if !started || live > size/2 {
		return nil
	}
	return fmt.Errorf("%w: %d of %d nodes reachable", ErrNoQuorum, live, size)
}

// explain returns err, led by ErrNoQuorum when this node is in a
// minority: an operation JetStream could not answer fails with a
// timeout or "no response from stream", which does not say why.
func (n *Node) explain(err error) error {
	if err == nil || errors.Is(err, ErrNoQuorum) {
		return err
	}
	if q := n.quorum(); q != nil {
		return fmt.Errorf("%w (%w)", q, err)
	}
	return err
}
