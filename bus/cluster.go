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

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/cluster"
	"github.com/bub-bus/bub/protocol"
)

// A bus that is one node of a cluster (Options.Cluster, docs/CLUSTER.md)
// keeps the single bus's code paths and changes only where state comes
// from and where deliveries go:
//
//   - a subscription is written to the cluster's one order before the
//     subscriber hears it is made, and enters the router with its
//     revision as its seq, so every node orders the chain alike;
//   - another node's connection that holds subscriptions is a stand-in
//     conn here (peer set), so the router, the walk, the publisher's
//     lanes, the event queues and the slow-subscriber rule treat it as
//     any connection; only call sends its deliveries through NATS;
//   - retries, holds and the dead-letter queue are in JetStream
//     (cluster.Store), and the pending work of a node that died is taken
//     over by the acting node.

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

// clusterState is what a node keeps besides a single bus's state.
type clusterState struct {
	self  string
	node  *cluster.Node
	store *cluster.Store
	// started is closed once node and store are set: cluster.Start
	// already runs the liveness that may call nodeDown.
	started chan struct{}

	// mu guards the maps. Lock order: clusterState.mu, then a stand-in
	// conn's mu, then router.mu; a local conn's mu is never held while
	// taking clusterState.mu.
	mu sync.Mutex
	// local are this node's initialized connections, by cid: deliveries
	// and takeovers from other nodes name them so.
	local map[uint64]*conn
	// own are this node's subscriptions in the order, by key: a delete
	// of one of these that this node did not make (it was presumed dead)
	// closes the connection, which then subscribes again elsewhere.
	own map[string]*subscription
	// remotes stand in for other nodes' connections holding
	// subscriptions; remoteSubs are those subscriptions, by key, and
	// byClient the stand-ins of each clientId, for retries.
	remotes    map[remotePeer]*conn
	remoteSubs map[string]*subscription
	byClient   map[string][]*conn

	// async counts work done off the caller's path (the deletes of a
	// closing connection, a takeover), so Shutdown waits for it before
	// leaving; leaving, under mu, refuses more once the wait has begun.
	async   sync.WaitGroup
	leaving bool
}

// goAsync runs f on a goroutine Shutdown waits for, unless the node is
// leaving already: then what f would do is the leave's (Close removes
// every key of the node) or the next node's to act.
func (cl *clusterState) goAsync(f func()) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.leaving {
		return
	}
	cl.async.Add(1)
	go func() {
		defer cl.async.Done()
		f()
	}()
}

// remotePeer names a connection on another node.
type remotePeer struct {
	node string
	cid  uint64
}

// joinCluster starts this node's membership. The router, scheduler and
// events exist already: Start applies the current subscriptions before
// it returns, and they may wake holds.
func (s *Server) joinCluster(opts cluster.Options) error {
	if opts.ApplySubscription != nil || opts.TakenOver != nil || opts.Deliver != nil || opts.NodeDown != nil {
		return errors.New("cluster options: the callbacks are the bus's own; leave them nil")
	}
	cl := &clusterState{
		self:       opts.NodeID,
		started:    make(chan struct{}),
		local:      make(map[uint64]*conn),
		own:        make(map[string]*subscription),
		remotes:    make(map[remotePeer]*conn),
		remoteSubs: make(map[string]*subscription),
		byClient:   make(map[string][]*conn),
	}
	s.cl = cl
	opts.ApplySubscription = s.applySubscription
	opts.TakenOver = s.takenOver
	opts.Deliver = s.deliverForNode
	opts.NodeDown = s.nodeDown
	if opts.Logger == nil {
		opts.Logger = s.log
	}
	if opts.MaxMessageBytes == 0 {
		opts.MaxMessageBytes = s.opts.MaxMessageBytes
	}
	node, err := cluster.Start(context.Background(), &opts)
	if err != nil {
		return err
	}
	cl.node = node
	cl.store = node.Store()
	close(cl.started)
	s.store = cl.store
	s.metrics.registry.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "bub_cluster_sync_timeouts_total",
			Help: "Subscribes and unsubscribes answered before every live node confirmed them (a node dying, or a watch recovering)."},
			func() float64 { return float64(node.SyncTimeouts()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bub_cluster_nodes_live", Help: "Nodes of the cluster this node hears heartbeats from, itself included."},
			func() float64 { return float64(len(node.Live())) }),
	)
	return nil
}

// applySubscription applies one change of the order, in revision order.
// This node's own puts are in the router already (shareSubscription).
func (s *Server) applySubscription(ch cluster.SubscriptionChange) {
	cl := s.cl
	if ch.Subscription.Node == cl.self {
		if ch.Deleted {
			s.ownDeleted(ch.Key, ch.Revision)
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
	pattern, err := protocol.ParsePattern(sub.Pattern)
	if err != nil {
		s.log.Warn("cluster: skipping a subscription this node cannot parse", "node", sub.Node, "client", sub.ClientID, "pattern", sub.Pattern, "err", err)
		return
	}
	policy := sub.Policy
	if !policy.Valid() {
		policy = s.opts.DefaultPolicy
	}
	cl.mu.Lock()
	cl.dropRemoteLocked(s, ch.Key)
	peer := remotePeer{sub.Node, sub.Conn}
	c := cl.remotes[peer]
	if c == nil {
		c = &conn{
			server:      s,
			log:         s.log.With("node", sub.Node, "client", sub.ClientID),
			peer:        &peer,
			initialized: true,
			clientID:    sub.ClientID,
			identity:    sub.Identity,
			subs:        make(map[string]*subscription),
		}
		cl.remotes[peer] = c
		cl.byClient[sub.ClientID] = append(cl.byClient[sub.ClientID], c)
	}
	rs := &subscription{seq: ch.Revision, pattern: pattern, policy: policy, fallback: sub.Fallback, conn: c}
	c.mu.Lock()
	c.subs[sub.Pattern] = rs
	c.mu.Unlock()
	s.router.insert(rs)
	cl.remoteSubs[ch.Key] = rs
	cl.mu.Unlock()
	s.sched.wakeHolds(pattern, sub.ClientID)
}

// dropRemoteLocked removes another node's subscription; a stand-in left
// with none is closed and forgotten. cl.mu is held.
func (cl *clusterState) dropRemoteLocked(s *Server, key string) {
	rs := cl.remoteSubs[key]
	if rs == nil {
		return
	}
	delete(cl.remoteSubs, key)
	s.router.remove(rs)
	c := rs.conn
	c.mu.Lock()
	if c.subs[rs.pattern.String()] == rs {
		delete(c.subs, rs.pattern.String())
	}
	empty := len(c.subs) == 0
	if empty {
		c.closed = true
	}
	c.mu.Unlock()
	if !empty {
		return
	}
	delete(cl.remotes, *c.peer)
	list := cl.byClient[c.clientID]
	for i, other := range list {
		if other == c {
			list = append(list[:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(cl.byClient, c.clientID)
	} else {
		cl.byClient[c.clientID] = list
	}
}

// ownDeleted hears that one of this node's subscriptions left the order.
// When this node removed it itself, it is no longer in own; otherwise
// another node did, having presumed this one dead (a long pause, a
// partition): the connection closes, so that its client reconnects and
// subscribes again, instead of waiting for deliveries nobody will route
// to it.
func (s *Server) ownDeleted(key string, rev uint64) {
	cl := s.cl
	cl.mu.Lock()
	sub := cl.own[key]
	// A delete older than the subscription is of an earlier one with the
	// same key (unsubscribed and subscribed again), applied late.
	if sub == nil || rev < sub.seq {
		cl.mu.Unlock()
		return
	}
	delete(cl.own, key)
	cl.mu.Unlock()
	c := sub.conn
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
	ctx, cancel := context.WithTimeout(s.ctx, clusterWriteTimeout)
	defer cancel()
	rev, err := cl.node.PutSubscription(ctx, cluster.Subscription{
		Conn: c.cid, Pattern: pattern, Policy: sub.policy, Fallback: sub.fallback, ClientID: clientID, Identity: identity,
	})
	c.mu.Lock()
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
		s.unshare(pattern, c.cid)
		return protocol.Errorf(protocol.ErrInternal, "subscribe %q: the cluster did not record the subscription: %v", pattern, err)
	}
	if !live {
		// Closed while the write was under way: its delete may have
		// gone before the put, so it is made again.
		s.unshare(pattern, c.cid)
		return protocol.Errorf(protocol.ErrShuttingDown, "connection is closing")
	}
	cl.mu.Lock()
	cl.own[cluster.SubscriptionKey(cl.self, c.cid, pattern)] = sub
	cl.mu.Unlock()
	if err := cl.node.Sync(ctx, rev); err != nil {
		c.log.Debug("cluster: subscribe not confirmed by every node in time", "pattern", pattern, "err", err)
	}
	return nil
}

// disown forgets a subscription of connection cid that this node itself
// removes from the order, so that its delete is not taken for another
// node's (ownDeleted).
func (cl *clusterState) disown(pattern string, cid uint64) {
	cl.mu.Lock()
	delete(cl.own, cluster.SubscriptionKey(cl.self, cid, pattern))
	cl.mu.Unlock()
}

// unshareNow removes a subscription of connection cid from the order
// and waits until every live node has applied that.
func (s *Server) unshareNow(pattern string, cid uint64) {
	cl := s.cl
	cl.disown(pattern, cid)
	ctx, cancel := context.WithTimeout(s.ctx, clusterWriteTimeout)
	defer cancel()
	rev, err := cl.node.DeleteSubscription(ctx, cid, pattern)
	if err != nil {
		s.log.Error("cluster: could not remove a subscription from the order; other nodes' deliveries to it fail until this node leaves", "pattern", pattern, "err", err)
		return
	}
	if err := cl.node.Sync(ctx, rev); err != nil {
		s.log.Debug("cluster: unsubscribe not confirmed by every node in time", "pattern", pattern, "err", err)
	}
}

// unshare is unshareNow off the caller's path: a closing connection's
// subscriptions leave the order without holding up its cleanup.
func (s *Server) unshare(pattern string, cid uint64) {
	cl := s.cl
	cl.disown(pattern, cid)
	cl.goAsync(func() {
		ctx, cancel := context.WithTimeout(context.Background(), clusterWriteTimeout)
		defer cancel()
		if _, err := cl.node.DeleteSubscription(ctx, cid, pattern); err != nil && !errors.Is(err, cluster.ErrClosed) {
			s.log.Error("cluster: could not remove a closed connection's subscription from the order", "pattern", pattern, "err", err)
		}
	})
}

// claim records that c, initializing, holds clientID across the
// cluster; the connection holding it on another node is closed there as
// taken over.
func (s *Server) claim(c *conn, clientID string) error {
	cl := s.cl
	cl.mu.Lock()
	cl.local[c.cid] = c
	cl.mu.Unlock()
	ctx, cancel := context.WithTimeout(s.ctx, clusterWriteTimeout)
	defer cancel()
	if _, err := cl.node.ClaimClient(ctx, clientID, c.cid); err != nil {
		cl.mu.Lock()
		delete(cl.local, c.cid)
		cl.mu.Unlock()
		if errors.Is(err, cluster.ErrTakenOver) {
			return protocol.Errorf(protocol.ErrInternal, "clientId %q was initialized by another connection while this one was", clientID)
		}
		return protocol.Errorf(protocol.ErrInternal, "initialize %q: the cluster did not record the client: %v", clientID, err)
	}
	return nil
}

// release forgets a closed connection, and its claim, off the caller's
// path.
func (s *Server) release(c *conn, clientID string) {
	cl := s.cl
	cl.mu.Lock()
	_, known := cl.local[c.cid]
	delete(cl.local, c.cid)
	cl.mu.Unlock()
	if !known {
		return
	}
	cl.goAsync(func() {
		ctx, cancel := context.WithTimeout(context.Background(), clusterWriteTimeout)
		defer cancel()
		if err := cl.node.ReleaseClient(ctx, clientID, c.cid); err != nil && !errors.Is(err, cluster.ErrClosed) {
			s.log.Warn("cluster: could not release a closed connection's clientId", "client", clientID, "err", err)
		}
	})
}

// localConn returns this node's connection cid, or nil.
func (cl *clusterState) localConn(cid uint64) *conn {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.local[cid]
}

// takenOver closes a connection whose clientId a connection on another
// node initialized with since. It runs on the claims watcher and does
// not wait: the close handshake goes on a goroutine of its own.
func (s *Server) takenOver(clientID string, cid uint64) {
	c := s.cl.localConn(cid)
	if c == nil {
		return
	}
	n := c.takeOver()
	c.log.Info("client taken over by a connection on another node", "client", clientID, "dropped_subscriptions", n)
}

// remoteStandIns returns the stand-ins of clientID's connections on
// other nodes.
func (cl *clusterState) remoteStandIns(clientID string) []*conn {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return append([]*conn(nil), cl.byClient[clientID]...)
}

// nodeDown hears that node stopped: its stand-ins leave the router at
// once (the acting node also deletes its keys, which every watch applies
// in time), and the acting node takes its pending work over.
func (s *Server) nodeDown(node string, acting bool) {
	cl := s.cl
	cl.mu.Lock()
	for key, rs := range cl.remoteSubs {
		if rs.conn.peer.node == node {
			cl.dropRemoteLocked(s, key)
		}
	}
	cl.mu.Unlock()
	if !acting {
		return
	}
	cl.goAsync(func() {
		s.takeOver(node)
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
func (s *Server) takeOver(node string) {
	cl := s.cl
	select {
	case <-cl.started:
	case <-s.ctx.Done():
		return
	}
	for {
		ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
		moved, err := cl.store.TakeOver(ctx, node)
		cancel()
		for _, p := range moved {
			s.resume(p)
		}
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
		if slices.Contains(cl.node.Live(), node) {
			return
		}
	}
}

// remoteAnswer is a remote delivery's outcome as the subscriber's node
// returns it: the subscriber's result, or the kind and detail of a
// deliveryError.
type remoteAnswer struct {
	Result json.RawMessage `json:"result,omitempty"`
	Kind   string          `json:"kind,omitempty"`
	Detail string          `json:"detail,omitempty"`
}

// callRemote delivers d to a subscriber on another node, through that
// node. The params are encoded here, once, exactly as a local delivery's
// would be, and the subscriber's node writes them as they are.
func (s *Server) callRemote(ctx context.Context, d *delivery) (protocol.ProcessMessageResult, error) {
	var result protocol.ProcessMessageResult
	peer := d.conn.peer
	bp := paramsPool.Get().(*[]byte)
	params := d.AppendParams((*bp)[:0])
	rd := &cluster.Delivery{ClientID: d.ClientID, Conn: peer.cid, Pattern: d.Subscription, Attempt: uint32(d.Attempt), Payload: params}
	if d.turn != nil {
		// The subscriber's node writes one node's requests to one
		// connection in the order they were sent, so the publisher's
		// next message may go once this one is sent.
		rd.Sent = d.turn.pass
	}
	resp, err := s.cl.node.Deliver(ctx, peer.node, rd)
	*bp = params
	if cap(params) <= maxPooledParams {
		paramsPool.Put(bp)
	}
	switch {
	case err == nil:
	case errors.Is(err, cluster.ErrDeliveryTimeout):
		return result, &deliveryError{failTimeout, fmt.Sprintf("node %s did not answer within %s", peer.node, s.opts.DeliveryTimeout+remoteMargin)}
	case errors.Is(err, cluster.ErrNodeGone):
		return result, &deliveryError{failDisconnected, fmt.Sprintf("node %s, which holds the subscriber, is gone", peer.node)}
	default:
		return result, &deliveryError{failDisconnected, err.Error()}
	}
	var a remoteAnswer
	if err := json.Unmarshal(resp, &a); err != nil {
		return result, &deliveryError{failBadResult, fmt.Sprintf("node %s answered a delivery with %.64q: %v", peer.node, resp, err)}
	}
	if a.Kind != "" {
		return result, &deliveryError{a.Kind, a.Detail}
	}
	if err := json.Unmarshal(a.Result, &result); err != nil {
		return result, &deliveryError{failBadResult, fmt.Sprintf("processMessage result: %v", err)}
	}
	return result, nil
}

// deliverForNode makes a delivery another node asked for, to one of this
// node's connections, and returns its outcome for that node to record.
// The subscriber's timeout and the slow-subscriber rule apply here, where
// the connection is; the asking node counts the delivery in its metrics.
func (s *Server) deliverForNode(ctx context.Context, rd *cluster.Delivery) (answer []byte, _ error) {
	var r protocol.ProcessMessageResult
	var err error
	defer func() {
		if p := recover(); p != nil {
			s.metrics.panics.WithLabelValues(panicRequest).Inc()
			s.log.Error("remote delivery panicked; recorded as failed", "client", rd.ClientID, "panic", p, "stack", string(debug.Stack()))
			answer, _ = json.Marshal(remoteAnswer{Kind: failError, Detail: "the delivery failed inside the subscriber's node; its log has the details"})
		}
	}()
	c := s.cl.localConn(rd.Conn)
	if c == nil || !c.holds(rd.ClientID, rd.Pattern) {
		err = &deliveryError{failDisconnected, fmt.Sprintf("client %q holds no subscription to %q on node %s any more", rd.ClientID, rd.Pattern, s.cl.self)}
	} else {
		d := &delivery{Message: &store.Message{}, ClientID: rd.ClientID, Subscription: rd.Pattern, Attempt: int(rd.Attempt), conn: c, params: rd.Payload, written: rd.Written}
		r, err = s.deliverLocal(ctx, d)
	}
	var a remoteAnswer
	var derr *deliveryError
	switch {
	case errors.As(err, &derr):
		a.Kind, a.Detail = derr.Kind, derr.Detail
	case err != nil:
		a.Kind, a.Detail = failError, err.Error()
	default:
		a.Result, _ = json.Marshal(&r)
	}
	answer, _ = json.Marshal(&a)
	return answer, nil
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

// leaveCluster waits for the writes still under way and leaves the
// cluster cleanly, so the other nodes act at once instead of after the
// node timeout.
func (s *Server) leaveCluster() error {
	cl := s.cl
	ctx, cancel := context.WithTimeout(context.Background(), leaveTimeout)
	defer cancel()
	// The closed connections' deletes are the leave's too (Close removes
	// every key of the node): they get until the leave's deadline, and
	// those still waiting then fail fast once the node is closed.
	cl.mu.Lock()
	cl.leaving = true
	cl.mu.Unlock()
	done := make(chan struct{})
	go func() {
		cl.async.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
	return cl.node.Close(ctx)
}
