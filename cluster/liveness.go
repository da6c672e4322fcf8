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

// headerRun is the heartbeat header naming the sender's run (Node.run).
const headerRun = "Bub-Run"

// ofRun reports whether a key written by run entryRun belongs to run:
// "" for run means every run (a node removing what its previous runs
// left), and a key without a run was written by a version that did not
// record one.
func ofRun(entryRun, run string) bool {
	return run == "" || entryRun == "" || entryRun == run
}

// liveness is the node's view of which nodes are alive. Each node's last
// heartbeat is timed by when this node received it, on this node's
// monotonic clock: clocks of other hosts never enter, so skew cannot make
// a healthy node look dead.
type liveness struct {
	// mu guards the fields below.
	mu sync.Mutex
	// seen holds when each live node's last heartbeat arrived.
	seen map[string]time.Time
	// runs holds the run each node was last heard from (its heartbeats
	// and its registration say), so that what is done for a node
	// presumed dead is done for that run only, not for a new one.
	runs map[string]string
	// left are nodes that said they leave, to report on the next check.
	left []down
	// unhandled are nodes no longer live that this node has not handled
	// yet: it lost them while it heard no majority (quorum), when it
	// cannot tell whether they or itself are cut off.
	unhandled map[string]down
	// checked is when checkNodes last ran, or the start.
	checked time.Time
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
// when a node dies: the live node with the lowest id, provided it hears
// a majority of the nodes (quorum). A node in a minority cannot tell
// whether the others died or it is cut off from them, and does not act
// (docs/CLUSTER.md, "A node dies"). Two nodes of a majority may briefly
// both believe they act (their views differ for up to a heartbeat), so
// every action taken on it is idempotent.
func (n *Node) Acting() bool {
	l := &n.liveness
	l.mu.Lock()
	decides := n.decidesLocked(time.Now()) == nil
	l.mu.Unlock()
	return decides && n.Live()[0] == n.id
}

// decidesLocked returns nil when this node may decide for the cluster
// that a node is gone: when the nodes it heard within half the node
// timeout, itself included, are a majority (quorumOf). Not merely the
// nodes it holds live: cut off from all the others at once, a node
// sees the first of them pass the node timeout while the others, as
// silent since, are still within it, and would have taken itself and
// those for a majority. l.mu is held.
func (n *Node) decidesLocked(now time.Time) error {
	fresh := 0
	for id, at := range n.liveness.seen {
		if id == n.id || now.Sub(at) <= n.opts.NodeTimeout/2 {
			fresh++
		}
	}
	if err := n.quorumOf(fresh); err != nil {
		return fmt.Errorf("%w within half the node timeout (%v)", err, n.opts.NodeTimeout/2)
	}
	return nil
}

// startLiveness registers the node in BUB_NODES, takes the nodes
// registered there as live until their heartbeats say otherwise, and
// starts the heartbeat. BUB_NODES is the membership a starting node reads
// so that its first Sync waits for everyone; the heartbeats are core
// NATS messages.
func (n *Node) startLiveness(ctx context.Context) error {
	n.liveness.seen = make(map[string]time.Time)
	n.liveness.seen[n.id] = time.Now()
	// The start is the first check's reference: a pause before the first
	// tick is the node's own silence too.
	n.liveness.checked = n.liveness.seen[n.id]
	n.liveness.runs = make(map[string]string)
	n.liveness.unhandled = make(map[string]down)
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
	value, err := json.Marshal(registration{Started: now.UTC(), Run: n.run})
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
	if err := n.heartbeat(beatAlive); err != nil {
		return fmt.Errorf("first heartbeat: %w", err)
	}
	n.goFunc(n.heartbeatLoop)
	n.goFunc(n.compactLoop)
	return nil
}

// registration is a BUB_NODES value.
type registration struct {
	Started time.Time `json:"started"`
	// Run is the registering run (Node.run).
	Run string `json:"run,omitempty"`
}

// heartbeat publishes this node's heartbeat, payload beat, naming its
// run.
func (n *Node) heartbeat(beat string) error {
	m := &nats.Msg{Subject: heartbeatSubject(n.id), Data: []byte(beat), Header: nats.Header{}}
	m.Header.Set(headerRun, n.run)
	return n.nc.PublishMsg(m)
}

// sawRegistration takes a node registered in BUB_NODES as live, if it
// is new to this node: it gets a full node timeout to show a heartbeat,
// however old its entry, since entry times come from other hosts' clocks.
// A node that registers while this node runs may have restarted (before
// anyone presumed it dead, or after it left and before this node
// handled that): the watches' consumers its previous run hosted went
// with it, and the watches start again (watch.go). A new node costs a
// restart for nothing. A registration of a run this node did not know
// the node by is that run's first sign of life: the node is live again,
// and what is still to be done for its previous run is done for that
// run only.
func (n *Node) sawRegistration(e jetstream.KeyValueEntry, initial bool) {
	if e.Operation() != jetstream.KeyValuePut || e.Key() == n.id || !protocol.ValidNodeID(e.Key()) {
		return
	}
	var reg registration
	_ = json.Unmarshal(e.Value(), &reg) // a value that does not parse names no run
	l := &n.liveness
	l.mu.Lock()
	_, known := l.seen[e.Key()]
	if !known {
		n.log.Info("cluster node registered", "peer", e.Key(), "run", reg.Run)
	}
	if !known || (reg.Run != "" && reg.Run != l.runs[e.Key()]) {
		l.seen[e.Key()] = time.Now()
		delete(l.unhandled, e.Key())
	}
	if reg.Run != "" {
		l.runs[e.Key()] = reg.Run
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
	if id == n.id || !protocol.ValidNodeID(id) || (n.opts.deaf != nil && n.opts.deaf(id)) {
		return
	}
	run := m.Header.Get(headerRun)
	l := &n.liveness
	l.mu.Lock()
	defer l.mu.Unlock()
	_, known := l.seen[id]
	if run != "" {
		l.runs[id] = run
	}
	if string(m.Data) == beatLeft {
		if known {
			delete(l.seen, id)
			l.left = append(l.left, down{id: id, run: l.runs[id]})
		}
		return
	}
	if !known {
		n.log.Info("cluster node live", "peer", id, "run", run)
	}
	l.seen[id] = time.Now()
	delete(l.unhandled, id)
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
		_ = n.heartbeat(beatAlive)
		n.checkNodes(time.Now())
	}
}

// down is a node this node no longer holds live.
type down struct {
	id string
	// presumed is set when its heartbeats stopped, unset when it left.
	presumed bool
	// run is the run it was last heard from, "" if none was named.
	run string
}

// checkNodes presumes dead the nodes whose heartbeat is older than the
// node timeout, and handles them with the nodes that left, once this
// node hears a majority of the nodes (decidesLocked). In a minority it
// handles none: it cannot tell whether they are gone or it is cut off
// from them, and handling them would have it remove, once the partition
// heals, the keys of nodes that ran on all along (a partitioned node did
// exactly that). They wait, and are handled once a majority is back if
// they are still silent then; one heard again meanwhile is no longer
// gone.
//
// A node that did not run for a while (its process paused: a long GC, a
// starved or suspended host) heard no heartbeat meanwhile, and the ones
// sent then are still queued when its first check after the pause runs:
// the pause is its own silence, not its peers', and the whole time since
// its last check is added to the time each of them has: a peer is then
// judged as it stood at that check, so a pause alone presumes none dead,
// however late their heartbeats already were. The cluster test saw all
// three nodes of one process paused for 1.6 s, past its 1.5 s node
// timeout, and two of them, each hearing the third first, presume each
// other dead and remove each other's claims. (Adding the gap less one
// heartbeat interval, as first written, still presumed dead a peer
// whose heartbeat was later than the node timeout less that interval at
// the last check: TestPausedNodePresumesNoneDead failed so in a loaded
// CI run.) The price: a peer that died during the pause is noticed up to
// one gap later.
func (n *Node) checkNodes(now time.Time) {
	l := &n.liveness
	l.mu.Lock()
	if gap := now.Sub(l.checked); gap > 2*n.opts.HeartbeatInterval {
		for id, at := range l.seen {
			l.seen[id] = at.Add(gap)
		}
		if paused := gap - n.opts.HeartbeatInterval; paused > n.opts.NodeTimeout/2 {
			n.log.Warn("cluster: this node did not run for a while; its peers' silence meanwhile is not held against them", "paused", paused.Round(time.Millisecond))
		}
	}
	l.checked = now
	for _, d := range l.left {
		if _, back := l.seen[d.id]; back {
			// It left and started again before this check: its new
			// run removed its old keys and resumes its own pending
			// work; taking that over too would run it twice (the
			// cluster test saw b1 take over 174 messages b3 had just
			// resumed).
			continue
		}
		l.unhandled[d.id] = d
	}
	l.left = nil
	var lost []string
	for id, at := range l.seen {
		if id != n.id && now.Sub(at) > n.opts.NodeTimeout {
			delete(l.seen, id)
			l.unhandled[id] = down{id: id, presumed: true, run: l.runs[id]}
			lost = append(lost, id)
		}
	}
	var gone []down
	noQuorum := n.decidesLocked(now)
	if noQuorum == nil {
		for id, d := range l.unhandled {
			gone = append(gone, d)
			delete(l.unhandled, id)
		}
	}
	l.mu.Unlock()
	if noQuorum != nil && len(lost) > 0 {
		slices.Sort(lost)
		n.log.Warn("cluster nodes silent; not handling them as down while this node is in a minority", "peers", lost, "err", noQuorum)
	}
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
		n.goFunc(func() { n.removeDeadNode(d) })
	}
	if n.handler.NodeDown != nil {
		n.handler.NodeDown(d.id, acting)
	}
}

// removeDeadNode deletes the subscriptions, claims and registration of
// d's run, trying again until it succeeds or this node closes: every
// node dropped the dead node's subscriptions from its router already,
// so keys left behind would make the order differ between the nodes,
// even if the node was only stalled and is back (it then sees its keys
// go, closes its connections, and their clients subscribe again). A new
// run of the node (it restarted meanwhile) removed what its previous
// run left as it started, and what it wrote since is its own: each key
// names the run that wrote it, and only d's run's keys are deleted,
// each by compare-and-delete on the revision read.
func (n *Node) removeDeadNode(d down) {
	for {
		tried := func(error) {}
		if n.opts.removing != nil {
			tried = n.opts.removing(d.id)
		}
		// Each try bounded, but long enough to outlast a JetStream leader
		// election, which the death of a leader's node starts.
		ctx, cancel := context.WithTimeout(n.ctx, max(n.opts.NodeTimeout, 20*time.Second))
		err := n.removeNodeKeys(ctx, d.id, d.run)
		if err == nil {
			err = n.removeRegistration(ctx, d.id, d.run)
		}
		cancel()
		tried(err)
		if err == nil || n.ctx.Err() != nil {
			return
		}
		n.log.Error("cluster: removing a dead node's keys failed; trying again", "peer", d.id, "run", d.run, "err", err)
		select {
		case <-time.After(5 * time.Second):
		case <-n.ctx.Done():
			return
		}
	}
}

// removeRegistration deletes node's BUB_NODES entry if run wrote it
// (ofRun), at the revision read.
func (n *Node) removeRegistration(ctx context.Context, node, run string) error {
	e, err := n.nodes.Get(ctx, node)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read the registration of %s: %w", node, err)
	}
	var reg registration
	if json.Unmarshal(e.Value(), &reg) == nil && !ofRun(reg.Run, run) {
		return nil
	}
	return n.deleteAt(ctx, n.nodes, e)
}

// removeNodeKeys deletes the subscriptions in BUB_SUBS and the claims
// in BUB_CLIENTS that run of node wrote (ofRun), each only if unchanged
// since read.
func (n *Node) removeNodeKeys(ctx context.Context, node, run string) error {
	all, err := currentEntries(ctx, n.subs, node+".>")
	if err != nil {
		return fmt.Errorf("list subscriptions of %s: %w", node, err)
	}
	var errs []error
	var subs int
	for _, e := range all {
		var s storedSubscription
		if json.Unmarshal(e.Value(), &s) == nil && !ofRun(s.Run, run) {
			continue
		}
		subs++
		errs = append(errs, n.deleteAt(ctx, n.subs, e))
	}
	clients, err := currentEntries(ctx, n.clients, ">")
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("list clients of %s: %w", node, err))...)
	}
	claimed := 0
	for _, e := range clients {
		var o owner
		if json.Unmarshal(e.Value(), &o) == nil && o.Node == node && ofRun(o.Run, run) {
			claimed++
			errs = append(errs, n.deleteAt(ctx, n.clients, e))
		}
	}
	if subs+claimed > 0 {
		n.log.Info("cluster: removed a node's keys", "peer", node, "run", run, "subscriptions", subs, "clients", claimed)
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
	l := &n.liveness
	l.mu.Lock()
	live, started := len(l.seen), l.seen != nil
	l.mu.Unlock()
	if !started {
		return nil
	}
	return n.quorumOf(live)
}

// quorumOf is quorum for live nodes heard, this one included.
func (n *Node) quorumOf(live int) error {
	size := max(n.size, live)
	if n.size == 0 || live > size/2 {
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
