package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/internal/drain"
	"github.com/bub-bus/bub/protocol"
)

// Every bus is a node of a Cluster (seam.go, docs/CLUSTER.md); a single
// node is one on its own. The bus's paths are the same either way, and
// only where state comes from and where deliveries go differs:
//
//   - a subscription is written to the cluster's one order before the
//     subscriber hears it is made, and enters the router with its
//     revision as its seq, so every node orders the chain alike;
//   - another node's connection that holds subscriptions is a standIn
//     here, a subscriber as a local connection is, so the router, the
//     walk, the publisher's lanes and the event queues treat it as any;
//     its deliveries go to its node, where that node's layers apply;
//   - retries, holds and the dead-letter queue are in the store the
//     cluster gives (JetStream for package cluster), and the pending work
//     of a node that died is taken over by the acting node.

// clusterWriteTimeout bounds one write to the cluster made on a peer's
// behalf (a subscription, a claim). JetStream answers in milliseconds
// when it has a quorum; without one, the peer hears why instead of
// waiting for ever.
const clusterWriteTimeout = 10 * time.Second

// remoteMargin is how much longer the publishing node waits for a remote
// delivery than the subscriber's node waits for the subscriber, so that
// a subscriber's timeout is reported by the node that saw it, as a
// timeout, and not as a node that did not answer.
const remoteMargin = 2 * time.Second

// clusterState is the bus's side of its Cluster, and its
// ClusterHandler.
type clusterState struct {
	server  *Server
	self    string
	cluster Cluster

	// mu guards the maps. Lock order: clusterState.mu, then a stand-in's
	// mu, then router.mu; a local conn's mu is never held while taking
	// clusterState.mu.
	mu sync.Mutex
	// local are this node's initialized connections, by cid: deliveries,
	// takeovers and deletes from other nodes name them so.
	local map[uint64]*conn
	// remotes stand in for other nodes' connections holding
	// subscriptions; remoteSubs are those subscriptions, by key, and
	// byClient the stand-ins of each clientId, for retries.
	remotes    map[remotePeer]*standIn
	remoteSubs map[string]*subscription
	byClient   map[string][]*standIn

	// takeovers are the takeovers of dead nodes' work under way, which
	// Shutdown waits for before leaving; once it has begun, a takeover
	// is the next acting node's.
	takeovers drain.Group
}

// remotePeer names a connection on another node.
type remotePeer struct {
	node string
	cid  uint64
}

// standIn is another node's connection that holds subscriptions, as
// this node routes to it.
type standIn struct {
	holding
	peer remotePeer
	// maxPending is the subscriber's grant's cap, as its latest
	// subscription carried it; guarded by mu.
	maxPending int
	// left is set once one of its durable subscriptions went away,
	// which only the connection's close (or its node's death) does: it
	// is no connected owner, even while the order still lists its other
	// subscriptions, whose removal its node writes apart. Guarded by mu.
	left bool
}

// leave marks the stand-in's connection closed on its node.
func (in *standIn) leave() {
	in.mu.Lock()
	in.left = true
	in.mu.Unlock()
}

// connected reports whether the stand-in's connection is open on its
// node, as far as this node has heard.
func (in *standIn) connected() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return !in.left && !in.closed
}

// deliver sends d to the stand-in's node, which makes it through its own
// layers: the subscriber's timeout and the slow-subscriber rule apply
// there, where late answers are seen, and come back as this delivery's
// failure. The wait here is the subscriber's timeout and remoteMargin.
func (in *standIn) deliver(ctx context.Context, d *delivery) (protocol.ProcessMessageResult, error) {
	ctx, cancel := context.WithTimeout(ctx, in.server.opts.DeliveryTimeout+remoteMargin)
	defer cancel()
	return in.server.cl.callRemote(ctx, in.peer, d)
}

// close does nothing: the connection is its node's to close.
func (in *standIn) close(websocket.StatusCode, string) {}

// pendingCapLocked is the cap of the subscriber's grant, which its node
// shares with its subscriptions, else the Limits'. The caller holds mu.
func (in *standIn) pendingCapLocked(l *Limits) int {
	if in.maxPending > 0 {
		return in.maxPending
	}
	return l.MaxPendingPerIdentity
}

// joinCluster makes the bus a node of its cluster. The router,
// scheduler and events exist already: Join applies the current
// subscriptions before it returns, and they may wake holds.
func (s *Server) joinCluster(ctx context.Context, c Cluster) error {
	_, self := c.Names()
	cl := &clusterState{
		server:     s,
		self:       self,
		cluster:    c,
		local:      make(map[uint64]*conn),
		remotes:    make(map[remotePeer]*standIn),
		remoteSubs: make(map[string]*subscription),
		byClient:   make(map[string][]*standIn),
	}
	s.cl = cl
	st, err := c.Join(ctx, &ClusterJoin{
		Handler: cl, Logger: s.log, MaxMessageBytes: s.opts.MaxMessageBytes, Registry: s.metrics.registry,
	})
	if err != nil {
		return err
	}
	s.store, s.limitState.store, s.keys, s.durables.shared = st.Store, st.Store, st.Keys, st.Durables
	return nil
}

// ApplySubscription applies one change of the order, in revision order.
// This node's own puts are in the router already (shareSubscription).
// Durable subscriptions have keys of their owners' and move between
// nodes (durable_cluster.go).
func (cl *clusterState) ApplySubscription(ch SubscriptionChange) {
	s := cl.server
	if ch.Subscription.Durable {
		s.durables.applyShared(ch)
		return
	}
	if ch.Subscription.Node == cl.self {
		if ch.Deleted {
			cl.ownDeleted(ch)
		}
		return
	}
	if ch.Deleted {
		cl.mu.Lock()
		cl.dropRemoteLocked(s, ch.Key)
		cl.mu.Unlock()
		return
	}
	sub := ch.Subscription
	pattern, ok := cl.parseRemote(&sub)
	if !ok {
		return
	}
	cl.mu.Lock()
	old := cl.forgetRemoteLocked(ch.Key)
	rs := cl.putRemoteLocked(ch.Key, &sub, ch.Revision, pattern)
	s.router.swap(old, rs)
	cl.mu.Unlock()
	s.sched.wakeHolds(pattern, sub.ClientID)
}

// parseRemote checks another node's subscription and returns its
// pattern; false, logged, when this node cannot route it.
func (cl *clusterState) parseRemote(sub *SharedSubscription) (*protocol.Pattern, bool) {
	s := cl.server
	pattern, err := protocol.ParsePattern(sub.Pattern)
	if err != nil {
		s.log.Warn("cluster: skipping a subscription this node cannot parse", "node", sub.Node, "client", sub.ClientID, "pattern", sub.Pattern, "err", err)
		return nil, false
	}
	if !sub.Policy.Valid() {
		// Routing it by another policy would walk the chain unlike the
		// subscriber's node does.
		s.log.Error("cluster: skipping a subscription whose policy this node does not know; run one version on every node", "node", sub.Node, "client", sub.ClientID, "pattern", sub.Pattern, "policy", sub.Policy)
		return nil, false
	}
	return pattern, true
}

// putRemoteLocked makes another node's subscription key, at seq in the
// order, its connection's stand-in made if it has none, and returns it,
// not yet in the router. cl.mu is held.
func (cl *clusterState) putRemoteLocked(key string, sub *SharedSubscription, seq uint64, pattern *protocol.Pattern) *subscription {
	s := cl.server
	peer := remotePeer{sub.Node, sub.Conn}
	in := cl.remotes[peer]
	if in == nil {
		in = &standIn{
			holding: holding{
				server:   s,
				log:      s.log.With("node", sub.Node, "client", sub.ClientID),
				clientID: sub.ClientID,
				identity: sub.Identity,
				subs:     make(map[string]*subscription),
			},
			peer: peer,
		}
		cl.remotes[peer] = in
		cl.byClient[sub.ClientID] = append(cl.byClient[sub.ClientID], in)
	}
	rs := &subscription{seq: seq, key: key, pattern: pattern, policy: sub.Policy, fallback: sub.Fallback, to: in}
	in.mu.Lock()
	in.subs[sub.Pattern] = rs
	in.maxPending = sub.MaxPending
	in.mu.Unlock()
	cl.remoteSubs[key] = rs
	return rs
}

// dropRemoteLocked removes another node's subscription; a stand-in left
// with none is closed and forgotten. cl.mu is held.
func (cl *clusterState) dropRemoteLocked(s *Server, key string) {
	if rs := cl.forgetRemoteLocked(key); rs != nil {
		s.router.remove(rs)
	}
}

// forgetRemoteLocked is dropRemoteLocked but for the router: it returns
// the subscription, still routed, for the caller to replace or remove.
func (cl *clusterState) forgetRemoteLocked(key string) *subscription {
	rs := cl.remoteSubs[key]
	if rs == nil {
		return nil
	}
	delete(cl.remoteSubs, key)
	in := rs.to.(*standIn)
	in.mu.Lock()
	if in.subs[rs.pattern.String()] == rs {
		delete(in.subs, rs.pattern.String())
	}
	empty := len(in.subs) == 0
	if empty {
		in.closed = true
	}
	in.mu.Unlock()
	if !empty {
		return rs
	}
	delete(cl.remotes, in.peer)
	list := cl.byClient[in.clientID]
	for i, other := range list {
		if other == in {
			list = append(list[:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(cl.byClient, in.clientID)
	} else {
		cl.byClient[in.clientID] = list
	}
	return rs
}

// ownDeleted hears that one of this node's subscriptions left the order.
// When this node removed it itself, its connection no longer holds it;
// otherwise another node did, having presumed this one dead (a long
// pause, a partition): the connection closes, so that its client
// reconnects and subscribes again, instead of waiting for deliveries
// nobody will route to it.
func (cl *clusterState) ownDeleted(ch SubscriptionChange) {
	c := cl.localConn(ch.Subscription.Conn)
	if c == nil {
		return
	}
	c.mu.Lock()
	var sub *subscription
	for _, held := range c.subs {
		// A delete older than the subscription is of an earlier one
		// with the same key (unsubscribed and subscribed again),
		// applied late.
		if held.key == ch.Key && held.seq <= ch.Revision {
			sub = held
			break
		}
	}
	c.mu.Unlock()
	if sub == nil {
		return
	}
	c.log.Warn("closing peer: the cluster removed its subscriptions, this node having been presumed dead", "client", c.id(), "pattern", sub.pattern.String())
	c.close(StatusTryAgainLater, closeRemovedByCluster)
}

// shareSubscription writes a subscription the connection just made to
// the cluster's order and puts it in the router with its revision, then
// waits until every live node has it, so that a publish on any node that
// starts after the subscriber's answer routes with it.
func (c *conn) shareSubscription(sub *subscription, clientID, identity string) error {
	s := c.server
	cl := s.cl
	pattern := sub.pattern.String()
	c.mu.Lock()
	maxPending, durable := c.maxPending, sub.durable && s.durables.shared != nil
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(s.ctx, clusterWriteTimeout)
	defer cancel()
	shared := SharedSubscription{
		Conn: c.cid, Pattern: pattern, Policy: sub.policy, Fallback: sub.fallback, ClientID: clientID, Identity: identity,
		MaxPending: maxPending, Durable: durable,
	}
	put := cl.cluster.PutSubscription
	if durable {
		// Under its owner's key, which outlives c (durable_cluster.go).
		put = func(ctx context.Context, sh SharedSubscription) (string, uint64, error) {
			return cl.cluster.PutDurableSubscription(ctx, sh, 0)
		}
	}
	key, rev, err := put(ctx, shared)
	if err == nil && durable {
		shared.Node = cl.self
		s.durables.wroteShared(key, shared, rev, rev)
	}
	c.mu.Lock()
	sub.key = key
	live := !c.closed && c.subs[pattern] == sub
	switch {
	case err != nil && live:
		delete(c.subs, pattern)
		s.metrics.subscriptions.Dec()
	case err == nil && live:
		sub.seq = rev
		s.router.insert(sub)
	}
	c.mu.Unlock()
	if err != nil {
		// The write may have landed all the same (a timeout after
		// JetStream took it): removed, so it is no ghost in the order.
		cl.cluster.DropSubscriptions([]string{key})
		return protocol.Errorf(protocol.ErrInternal, "subscribe %q: the cluster did not record the subscription: %v", pattern, err)
	}
	if !live {
		// Closed while the write was under way: its delete may have
		// gone before the put, so it is made again.
		cl.cluster.DropSubscriptions([]string{key})
		return protocol.Errorf(protocol.ErrShuttingDown, "connection is closing")
	}
	if err := cl.cluster.Sync(ctx, rev); err != nil {
		c.log.Debug("cluster: subscribe not confirmed by every node in time", "pattern", pattern, "err", err)
	}
	return nil
}

// unshareNow removes a subscription the connection no longer holds from
// the order and waits until every live node has applied that.
func (cl *clusterState) unshareNow(sub *subscription) {
	s := cl.server
	ctx, cancel := context.WithTimeout(s.ctx, clusterWriteTimeout)
	defer cancel()
	rev, err := cl.cluster.DeleteSubscription(ctx, sub.key)
	if err != nil {
		s.log.Error("cluster: could not remove a subscription from the order; other nodes' deliveries to it fail until this node leaves", "pattern", sub.pattern.String(), "err", err)
		return
	}
	if err := cl.cluster.Sync(ctx, rev); err != nil {
		s.log.Debug("cluster: unsubscribe not confirmed by every node in time", "pattern", sub.pattern.String(), "err", err)
	}
}

// claim records that c, initializing, holds clientID across the
// cluster; the connection holding it on another node is closed there as
// taken over.
func (cl *clusterState) claim(c *conn, clientID string) error {
	s := cl.server
	cl.mu.Lock()
	cl.local[c.cid] = c
	cl.mu.Unlock()
	ctx, cancel := context.WithTimeout(s.ctx, clusterWriteTimeout)
	defer cancel()
	if err := cl.cluster.ClaimClient(ctx, clientID, c.cid); err != nil {
		cl.mu.Lock()
		delete(cl.local, c.cid)
		cl.mu.Unlock()
		if errors.Is(err, ErrClaimLost) {
			return protocol.Errorf(protocol.ErrInternal, "clientId %q was initialized by another connection while this one was", clientID)
		}
		return protocol.Errorf(protocol.ErrInternal, "initialize %q: the cluster did not record the client: %v", clientID, err)
	}
	return nil
}

// release forgets a closed connection, and its claim.
func (cl *clusterState) release(c *conn, clientID string) {
	cl.mu.Lock()
	_, known := cl.local[c.cid]
	delete(cl.local, c.cid)
	cl.mu.Unlock()
	if known {
		cl.cluster.ReleaseClient(clientID, c.cid)
	}
}

// localConn returns this node's connection cid, or nil.
func (cl *clusterState) localConn(cid uint64) *conn {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.local[cid]
}

// TakenOver closes a connection whose clientId a connection on another
// node initialized with since. It runs on the claims watcher and does
// not wait: the close handshake goes on a goroutine of its own.
func (cl *clusterState) TakenOver(clientID string, cid uint64) {
	c := cl.localConn(cid)
	if c == nil {
		return
	}
	n := c.takeOver()
	c.log.Info("client taken over by a connection on another node", "client", clientID, "dropped_subscriptions", n)
}

// ClaimRemoved closes a connection whose claim another node removed,
// having presumed this node dead, as ownDeleted does for its
// subscriptions: with 1013, so that the client reconnects, and
// subscribes again, where 4001 would tell it to give up.
func (cl *clusterState) ClaimRemoved(clientID string, cid uint64) {
	c := cl.localConn(cid)
	if c == nil {
		return
	}
	c.log.Warn("closing peer: the cluster removed its clientId's claim, this node having been presumed dead", "client", clientID)
	c.close(StatusTryAgainLater, closeRemovedByCluster)
}

// remoteStandIns returns the stand-ins of clientID's connections on
// other nodes.
func (cl *clusterState) remoteStandIns(clientID string) []*standIn {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return append([]*standIn(nil), cl.byClient[clientID]...)
}

// NodeDown hears that node stopped: its stand-ins leave the router at
// once (the acting node also deletes its keys, which every watch applies
// in time), and the acting node takes its pending work over.
func (cl *clusterState) NodeDown(node string, acting bool) {
	s := cl.server
	// Its owners' durable subscriptions are away from now on, not gone.
	s.durables.nodeDown(node, acting)
	cl.mu.Lock()
	for key, rs := range cl.remoteSubs {
		if rs.to.(*standIn).peer.node == node {
			cl.dropRemoteLocked(s, key)
		}
	}
	cl.mu.Unlock()
	if !acting {
		return
	}
	cl.takeovers.Go(func() {
		cl.takeOver(node)
	})
}

// takeOverRetry is the pause between tries to take a dead node's
// pending work over.
const takeOverRetry = 5 * time.Second

// takeOver moves a dead node's pending work to this node and schedules
// it. JetStream can be unavailable for a while around a node's death (an
// election, a watch recovering), so a failed try is made again until it
// succeeds, the node is back (it resumes its own work when it starts), or
// this bus shuts down.
func (cl *clusterState) takeOver(node string) {
	s := cl.server
	for {
		ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
		moved, err := cl.cluster.TakeOver(ctx, node)
		cancel()
		for _, p := range moved {
			s.sched.resume(p)
		}
		s.durables.tookOver(moved)
		if len(moved) > 0 {
			s.log.Info("cluster: took over a dead node's pending work", "dead_node", node, "pending", len(moved))
		}
		if err == nil {
			return
		}
		s.log.Error("cluster: could not take over a dead node's pending work; trying again", "dead_node", node, "taken", len(moved), "retry_in", takeOverRetry, "err", err)
		select {
		case <-time.After(takeOverRetry):
		case <-s.ctx.Done():
			return
		}
		if slices.Contains(cl.cluster.Live(), node) {
			return
		}
	}
}

// remoteAnswer is a remote delivery's outcome as the subscriber's node
// returns it: the subscriber's result, or the kind and detail of a
// deliveryError. Result is a struct, not raw JSON, so that each node
// encodes or decodes an answer in one pass, not two (docs/BENCHMARKS.md,
// "Where the cross-node CPU goes"); the JSON is the same.
type remoteAnswer struct {
	Result *protocol.ProcessMessageResult `json:"result,omitempty"`
	Kind   string                         `json:"kind,omitempty"`
	Detail string                         `json:"detail,omitempty"`
}

// callRemote delivers d to a subscriber on another node, through that
// node. The params are encoded here, once, exactly as a local delivery's
// would be, and the subscriber's node writes them as they are.
func (cl *clusterState) callRemote(ctx context.Context, peer remotePeer, d *delivery) (protocol.ProcessMessageResult, error) {
	s := cl.server
	var result protocol.ProcessMessageResult
	bp := paramsPool.Get().(*[]byte)
	params := d.AppendParams((*bp)[:0])
	rd := &RemoteDelivery{ClientID: d.ClientID, Conn: peer.cid, Pattern: d.Subscription, Attempt: uint32(d.Attempt), Payload: params}
	if deadline, ok := ctx.Deadline(); ok {
		// The subscriber's clock starts with this node's (timeout).
		rd.Deadline = deadline.Add(-remoteMargin)
	}
	if d.turn != nil {
		// The subscriber's node writes one node's requests to one
		// connection in the order they were sent, so the publisher's
		// next message may go once this one is sent.
		rd.Sent = d.turn.pass
	}
	resp, err := s.cl.cluster.Deliver(ctx, peer.node, rd)
	putParams(bp, params)
	switch {
	case err == nil:
	case errors.Is(err, ErrRemoteTimeout):
		return result, &deliveryError{failTimeout, fmt.Sprintf("node %s did not answer within %s", peer.node, s.opts.DeliveryTimeout+remoteMargin)}
	case errors.Is(err, ErrNodeGone):
		return result, &deliveryError{failDisconnected, fmt.Sprintf("node %s, which holds the subscriber, is gone", peer.node)}
	default:
		return result, &deliveryError{failDisconnected, err.Error()}
	}
	a := remoteAnswer{Result: &result}
	if err := json.Unmarshal(resp, &a); err != nil {
		return result, &deliveryError{failBadResult, fmt.Sprintf("node %s answered a delivery with %.64q: %v", peer.node, resp, err)}
	}
	if a.Kind != "" {
		return result, &deliveryError{a.Kind, a.Detail}
	}
	return result, nil
}

// Deliver makes a delivery another node asked for, to one of this node's
// connections, and returns its outcome for that node to record. The
// subscriber's timeout and the slow-subscriber rule apply here, where the
// connection is; the asking node counts the delivery in its metrics.
func (cl *clusterState) Deliver(ctx context.Context, rd *RemoteDelivery) (answer []byte) {
	s := cl.server
	var r protocol.ProcessMessageResult
	var err error
	defer func() {
		if p := recover(); p != nil {
			s.metrics.panics.WithLabelValues(panicRequest).Inc()
			s.log.Error("remote delivery panicked; recorded as failed", "client", rd.ClientID, "panic", p, "stack", string(debug.Stack()))
			answer, _ = json.Marshal(remoteAnswer{Kind: failError, Detail: "the delivery failed inside the subscriber's node; its log has the details"})
		}
	}()
	if !rd.Deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, rd.Deadline)
		defer cancel()
	}
	c := cl.localConn(rd.Conn)
	switch {
	case !rd.Deadline.IsZero() && !time.Now().Before(rd.Deadline):
		// Queued here behind the subscriber's earlier deliveries until
		// the asking node stopped waiting: sent now, it would be made
		// and retried too.
		err = &deliveryError{failTimeout, fmt.Sprintf("not sent: it waited on node %s behind client %q's earlier deliveries past its delivery timeout", cl.self, rd.ClientID)}
	case c == nil || !c.holds(rd.ClientID, rd.Pattern):
		err = &deliveryError{failDisconnected, fmt.Sprintf("client %q holds no subscription to %q on node %s any more", rd.ClientID, rd.Pattern, cl.self)}
	default:
		d := &delivery{Message: &store.Message{}, ClientID: rd.ClientID, Subscription: rd.Pattern, Attempt: int(rd.Attempt), to: c, params: rd.Payload, written: rd.Written}
		r, err = c.deliver(ctx, d)
	}
	var a remoteAnswer
	var derr *deliveryError
	switch {
	case errors.As(err, &derr):
		a.Kind, a.Detail = derr.Kind, derr.Detail
	case err != nil:
		a.Kind, a.Detail = failError, err.Error()
	default:
		a.Result = &r
	}
	answer, _ = json.Marshal(&a)
	return answer
}

// holds reports whether c is clientID's connection and holds pattern.
func (c *conn) holds(clientID, pattern string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.closed && c.clientID == clientID && c.subs[pattern] != nil
}

// leaveTimeout bounds the writes of a clean leave. The last node of a
// cluster that stops leaves without a quorum, and its writes cannot
// succeed: it should not wait long for them.
const leaveTimeout = 3 * time.Second

// leaveCluster waits for the takeovers under way and leaves the cluster
// cleanly, so the other nodes act at once instead of after the node
// timeout.
func (cl *clusterState) leaveCluster() error {
	ctx, cancel := context.WithTimeout(context.Background(), leaveTimeout)
	defer cancel()
	_ = cl.takeovers.Close(ctx) // what is still under way is the next node's
	return cl.cluster.Leave(ctx)
}
