package bus

import (
	"errors"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/bub-bus/bub/auth"
	"github.com/bub-bus/bub/internal/outbound"
	"github.com/bub-bus/bub/internal/rpcstream"
	"github.com/bub-bus/bub/protocol"
)

// WebSocket close statuses the bus sends, besides the standard ones.
const (
	// StatusTakenOver closes a connection whose clientId a newer
	// connection initialized with.
	StatusTakenOver websocket.StatusCode = protocol.CloseTakenOver
)

// Close reasons, logged and counted.
const (
	closeShutdown  = "bus shutting down"
	closeTakenOver = "clientId taken over by a newer connection"
	closePingLost  = "ping timed out"
	closeTooBig    = "message too big"
	// closeInvalidUTF8: a text message that is not valid UTF-8; the
	// Stream has closed with 1007.
	closeInvalidUTF8 = "text message not valid UTF-8"
	// closeEventBacklog: more system:client.* events wait for the peer
	// than maxEventBacklog.
	closeEventBacklog = "too many lifecycle events waiting"
	// closeRemovedByCluster: the cluster presumed this node dead and
	// removed its subscriptions (cluster.go).
	closeRemovedByCluster = "subscriptions removed by the cluster; reconnect"
)

// StatusTryAgainLater (1013) closes a connection whose client should
// reconnect, to this node or another, and subscribe again.
const StatusTryAgainLater websocket.StatusCode = 1013

// conn is one peer's WebSocket connection.
type conn struct {
	// holding has the connection's subscriptions, and the mu that
	// guards them and the fields below that say so.
	holding
	ws *websocket.Conn
	// out writes the connection's frames, coalesced; ws only reads and
	// closes.
	out    *outbound.Conn
	stream *rpcstream.Stream
	remote string
	// cid numbers the connection on this node; a cluster names it by
	// node and cid.
	cid uint64
	// since is when the connection was accepted.
	since time.Time

	// slots bounds the requests running off the read loop.
	slots chan struct{}
	// lanes order this connection's messages per subscriber (order.go);
	// only the goroutine handling its requests in order touches them:
	// the read loop, or inOrder's while it runs.
	lanes     lanes
	inOrder   inOrder
	closeOnce sync.Once

	// holding.mu guards the fields below.
	initialized  bool
	takenOver    bool
	publishOnly  bool
	defaultTopic string
	// cred is what the connection presented; principal, access and
	// identity are what it was found to be at initialize (or the last
	// reload). access is nil on an open bus: everything is allowed.
	cred      credential
	principal *auth.Principal
	access    *auth.Access
	// expiry closes the connection when its credential expires.
	expiry *time.Timer

	connLimits
	// activity has a lock of its own (activity.go).
	activity activity

	// end is called once the connection has ended and cleaned up: what
	// accepted it lets go of it (serveWebSocket).
	end func()
	// readOnFn is readOn as a func value made once, for Park.
	readOnFn func()

	// The keepalive schedule (keepalive.go), guarded by pinger.mu.
	pingPrev, pingNext *conn
	pingDue            time.Duration
	pinged             bool // on the schedule
}

func (s *Server) newConn(ws *websocket.Conn, out *outbound.Conn, remote string) *conn {
	ws.SetReadLimit(s.opts.MaxMessageBytes)
	// And on a frame's header: a peer that declares more and sends
	// nothing gets its 1009 at once, not at the ping timeout.
	out.SetReadLimit(s.opts.MaxMessageBytes)
	c := &conn{
		holding: holding{server: s, log: s.log.With("remote", remote), subs: make(map[string]*subscription)},
		ws:      ws,
		out:     out,
		stream:  rpcstream.NewOutbound(ws, out),
		remote:  remote,
		cid:     s.connSeq.Add(1),
		since:   time.Now(),
		slots:   make(chan struct{}, s.opts.MaxInFlight),
	}
	c.inOrder.init()
	// Idle, it parks (serve).
	out.AllowPark()
	// An answer that comes after its call timed out still shows the peer
	// is there (Limits.SlowSubscriberTimeouts).
	c.stream.OnLateAnswer(c.noteLateAnswer)
	return c
}

// serve runs the connection until it ends, then calls end; the Server
// registered it. Between messages the connection parks
// (rpcstream.Stream.ParkWhenIdle): no goroutine of the bus waits for an
// idle peer, and one is started to read on once the peer sends
// (docs/BENCHMARKS.md, "Idle connection memory").
func (c *conn) serve(end func()) {
	s := c.server
	s.metrics.connections.Inc()
	c.log.Debug("peer connected")

	c.end = end
	c.readOnFn = c.readOn
	c.stream.ParkWhenIdle(c.park)
	s.pinger.add(c)
	c.run()
}

// park parks the connection if nothing is there to read (the Stream
// calls it before each read). Counted first: once parked, the connection
// may be resumed before Park returns.
func (c *conn) park() bool {
	c.server.metrics.parked.Inc()
	if c.out.Park(c.readOnFn) {
		return true
	}
	c.server.metrics.parked.Dec()
	return false
}

// readOn reads on, on a goroutine of its own, once a parked connection's
// peer has sent, hung up, or the connection was closed.
func (c *conn) readOn() {
	c.server.metrics.parked.Dec()
	c.run()
}

// run reads until the connection parks, or ends: then it cleans up.
func (c *conn) run() {
	if c.readLoop() {
		return
	}
	s := c.server
	// Out of the router at once, as close and pingLost do: the in-order
	// runs stopInOrder waits for can take a delivery timeout, and a
	// message routed to the connection meanwhile could not be written
	// (not_sent). detach again in cleanup does nothing.
	c.detach()
	s.pinger.remove(c)
	c.stopInOrder()
	c.cleanup()
	c.end()
}

// readLoop hands every request to dispatch until the connection parks
// (it returns true: the goroutine must leave the connection alone) or
// fails. Answers to processMessage calls go to their callers inside the
// Stream.
func (c *conn) readLoop() (parked bool) {
	for {
		req, err := c.stream.ReadRequest()
		if errors.Is(err, rpcstream.ErrParked) {
			return true
		}
		if err != nil {
			// websocket has already closed with 1009; without this the
			// peer's only clue is a dropped connection.
			if errors.Is(err, websocket.ErrMessageTooBig) {
				c.log.Info("closing peer", "client", c.id(), "reason", closeTooBig, "max_message_bytes", c.server.opts.MaxMessageBytes)
				c.server.metrics.closes.WithLabelValues(closeTooBig).Inc()
			}
			if errors.Is(err, rpcstream.ErrInvalidUTF8) {
				c.log.Info("closing peer", "client", c.id(), "reason", closeInvalidUTF8, "err", err)
				c.server.metrics.closes.WithLabelValues(closeInvalidUTF8).Inc()
			}
			// Answers to its calls that failed with it may have been
			// written in the batch (direct.go).
			c.out.Batch().Flush()
			return false
		}
		c.dispatch(req)
	}
}

// pingLost drops a peer that did not answer a ping within PingInterval:
// its subscriptions go at once, and closing the socket (no close
// handshake: the peer has stopped answering) ends the read loop, which
// cleans up. It never waits, since the pinger calls it for every
// connection.
func (c *conn) pingLost() {
	c.log.Info("dropping peer", "client", c.id(), "reason", closePingLost)
	c.server.metrics.closes.WithLabelValues(closePingLost).Inc()
	c.detach()
	c.closeOnce.Do(func() { _ = c.out.Close() })
}

// takeOver closes c because another connection initialized with its
// clientId: its subscriptions go first, so the client is never routed to
// twice. It returns how many subscriptions c held.
func (c *conn) takeOver() int {
	c.mu.Lock()
	c.takenOver = true
	c.mu.Unlock()
	n := c.detach()
	c.close(StatusTakenOver, closeTakenOver)
	return n
}

// close closes the connection with a status and reason. Its subscriptions
// go at once, so no delivery waits on a peer that is going away; the rest
// of the cleanup runs in serve once the JSON-RPC connection notices.
func (c *conn) close(code websocket.StatusCode, reason string) {
	c.detach()
	c.closeOnce.Do(func() {
		c.server.metrics.closes.WithLabelValues(reason).Inc()
		// Close waits for the peer's close frame for a few seconds at
		// most; the read loop then ends and cleans up.
		go func() { _ = c.stream.CloseWith(code, reason) }()
	})
}

// cleanup drops the connection's subscriptions and identity.
func (c *conn) cleanup() {
	s := c.server
	s.mu.Lock()
	delete(s.conns, c)
	if s.clients[c.id()] == c {
		delete(s.clients, c.id())
	}
	s.mu.Unlock()
	subs := c.detach()
	s.metrics.connections.Dec()
	c.mu.Lock()
	id, identity, takenOver, publishOnly, slot := c.clientID, c.identity, c.takenOver, c.publishOnly, c.identitySlot
	if c.expiry != nil {
		c.expiry.Stop()
		c.expiry = nil
	}
	c.mu.Unlock()
	if slot != nil {
		slot()
	}
	if id != "" && !publishOnly {
		s.cl.release(c, id)
	}
	if id != "" && !publishOnly {
		reason := ""
		if takenOver {
			reason = "taken_over"
		}
		s.events.clientEvent(TopicClientDisconnected, "disconnected", id, identity, "", false, reason)
	}
	_ = c.ws.CloseNow()
	c.log.Debug("peer disconnected", "client", c.id(), "subscriptions", subs)
}

// detach marks the connection closed and drops its subscriptions from the
// router and the cluster's order, so it receives no more deliveries; it
// returns how many it held. One whose write to the order is under way is
// removed by shareSubscription, which finds the connection closed.
func (c *conn) detach() int {
	c.mu.Lock()
	c.closed = true
	subs := c.subs
	c.subs = nil
	var keys []string
	for _, sub := range subs {
		// A durable one's key is its owner's: it stays in the order,
		// away (leaveDurable).
		if sub.seq != 0 && !sub.durable {
			keys = append(keys, sub.key)
		}
	}
	c.mu.Unlock()
	// Durable ones stay in the router, as their owner's while it is away.
	c.server.durables.leaveDurable(c, subs)
	for _, sub := range subs {
		c.server.router.remove(sub)
	}
	if len(keys) > 0 {
		c.server.cl.cluster.DropSubscriptions(keys)
	}
	c.server.metrics.subscriptions.Sub(float64(len(subs)))
	return len(subs)
}
