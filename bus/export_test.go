package bus

import (
	"fmt"
	"testing"
	"time"

	"github.com/bub-bus/bub/auth"
	"github.com/bub-bus/bub/bus/store"
)

// HeldUntil returns when each message held on topic is next due: the end
// of its wait, or a past time once a subscription woke it (subscribe
// wakes holds before it answers) and until its attempt's answer.
func HeldUntil(s *Server, topic string) []time.Time {
	q := s.sched
	q.mu.Lock()
	defer q.mu.Unlock()
	var due []time.Time
	for e := range q.holds[topic] {
		due = append(due, e.p.NextAt)
	}
	return due
}

// IdempotentUsage returns what identity's idempotency records take, as
// s's store counts them: on a cluster, as s's node sees every node's.
func IdempotentUsage(s *Server, identity string) (store.Usage, error) {
	return s.store.IdempotentUsage(identity)
}

// SetMaxEventBacklog lowers the system:client.* backlog that disconnects a
// subscriber, for the test's duration; the test must not run in parallel.
func SetMaxEventBacklog(t testing.TB, n int) {
	old := maxEventBacklog
	maxEventBacklog = n
	t.Cleanup(func() { maxEventBacklog = old })
}

// Crash stops a cluster node as kill -9 would look to the rest of the
// cluster and to its peers: its NATS connection and embedded server go at
// once, with none of its keys removed; its peers' sockets are cut without
// a close handshake; its scheduler stops. The test's cleanup may still
// call Shutdown.
func Crash(s *Server) {
	s.cl.cluster.(interface{ Crash() }).Crash()
	s.cancel()
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.closeOnce.Do(func() { _ = c.out.Close() })
	}
}

// MethodInfo is what the dispatch table says of one method.
type MethodInfo struct{ Queued, InOrder, Admin, Open bool }

// MethodTable returns s's dispatch table (the core's methods and its
// add-ons'), without its handlers.
func MethodTable(s *Server) map[string]MethodInfo {
	out := make(map[string]MethodInfo, len(s.methods))
	for name, m := range s.methods {
		out[name] = MethodInfo{Queued: m.queued, InOrder: m.inOrder, Admin: m.admin, Open: m.open}
	}
	return out
}

// PanicInInitialize makes initialize panic inside its locked section
// for clientID, for the test's duration; the test must not run in
// parallel.
func PanicInInitialize(t testing.TB, clientID string) {
	initializeHook = func(id string) {
		if id == clientID {
			panic("test: panic inside initialize's locked section")
		}
	}
	t.Cleanup(func() { initializeHook = nil })
}

// OpenIdentities returns the identity of every initialized connection
// that is not closing, as the bus sees them now.
func OpenIdentities(s *Server) []string {
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	var ids []string
	for _, c := range conns {
		c.mu.Lock()
		if c.initialized && !c.closed {
			ids = append(ids, c.identity)
		}
		c.mu.Unlock()
	}
	return ids
}

// ExpiryDelay is how long after now a connection's credential, expiring
// at exp, is checked; MaxExpiryWait bounds it, the skew allowance aside.
var ExpiryDelay = expiryDelay

// MaxExpiryWait is maxExpiryWait.
const MaxExpiryWait = maxExpiryWait

// Conn is a connection, for tests that reach into one.
type Conn = conn

// ClientConn returns the connection initialized as clientID, nil if
// none. The test may keep it after the connection ends.
func ClientConn(s *Server, clientID string) *Conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.clients[clientID]
}

// Recheck runs a reload's check of the connection against the
// Authenticator in force, as SetAuth does for each connection it found.
func (c *conn) Recheck() string { return c.recheck(c.server.auth.Load()) }

// RecheckAgainst runs that check against a, as a check that started
// before a reload replaced a would.
func (c *conn) RecheckAgainst(a *auth.Authenticator) string { return c.recheck(a) }

// ExpiryArmed reports whether the connection's credential expiry timer
// is set.
func (c *conn) ExpiryArmed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.expiry != nil
}

// WriteStats returns how many write calls the connection's socket has
// taken and how many frames they carried.
func (c *conn) WriteStats() (writes, frames uint64) { return c.out.Stats() }

// PanicInDeliveries makes every delivery attempt to clientID panic in a
// delivery layer, the innermost, for servers started during the test:
// in its enter half, before the call, or with after in its leave half,
// once the subscriber answered. The test must not run in parallel.
func PanicInDeliveries(t testing.TB, clientID string, after bool) {
	boom := func(d *delivery) {
		if d.ClientID == clientID {
			panic("test: panic in a delivery layer")
		}
	}
	layerHook = &layer{
		enter: func(_ *conn, d *delivery) error {
			if !after {
				boom(d)
			}
			return nil
		},
		leave: func(_ *conn, d *delivery, _ error) {
			if after {
				boom(d)
			}
		},
	}
	t.Cleanup(func() { layerHook = nil })
}

// DeliveriesInFlight returns the deliveries to the connection the bus
// counts as in flight, whose first and last it reports on
// system:client.busy and system:client.idle.
func (c *conn) DeliveriesInFlight() int {
	c.activity.mu.Lock()
	defer c.activity.mu.Unlock()
	return c.activity.inFlight
}

// WaitInOrder waits for the connection's in-order goroutine (inorder.go)
// to end, once the requests it runs are answered, so that the next
// request is handled on the read loop: a peer can read the answer to
// its initialize before the goroutine that wrote it has ended. Nothing
// may queue an in-order request meanwhile.
func (c *conn) WaitInOrder() { c.inOrder.runs.Wait() }

// ViaPipeline returns o with every delivery of a walk made through the
// delivery pipeline, on a goroutine of its own, rather than by a call the
// walk writes itself (walk.go).
func ViaPipeline(o *Options) *Options {
	o.viaPipeline = true
	return o
}

// QueueFull reports whether the connection's queue has no room for a
// frame a read loop would queue: a walk then makes its delivery on a
// goroutine (walk.go).
func (c *conn) QueueFull() bool { return !c.out.HasRoom(frameRoom) }

// LiveNodes returns the nodes a cluster node holds live, itself
// included.
func LiveNodes(s *Server) []string { return s.cl.cluster.Live() }

// StandInSubscriptions returns the patterns this node routes to
// clientID's connections on other nodes, as "node/conn pattern".
func StandInSubscriptions(s *Server, clientID string) []string {
	var subs []string
	for _, in := range s.cl.remoteStandIns(clientID) {
		in.mu.Lock()
		for pattern := range in.subs {
			subs = append(subs, fmt.Sprintf("%s/%d %s", in.peer.node, in.peer.cid, pattern))
		}
		in.mu.Unlock()
	}
	return subs
}
