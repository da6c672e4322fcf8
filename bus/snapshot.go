package bus

import (
	"cmp"
	"slices"
	"time"

	"github.com/coder/websocket"

	"github.com/bub-bus/bub/protocol"
)

// What an operator's tools (the console) see of the core: copies made
// under the core's own locks and handed out as plain values, so that no
// add-on takes a core lock or keeps a pointer into the core's state.

// A Subscription is one subscription as an operator sees it.
type Subscription struct {
	Pattern  string
	Policy   protocol.Policy
	Fallback bool
	// Rank is its place in the cluster's order: a higher one is newer
	// and comes first in a chain.
	Rank uint64
}

// A Client is a connection as an operator sees it. A client on another
// node of a cluster is known here only by the subscriptions it holds:
// its address, age, requests and slowness are its node's to show, and
// stay zero.
type Client struct {
	ClientID string
	Identity string
	Node     string
	// Local says it is connected to this node.
	Local       bool
	Address     string
	Since       time.Time
	PublishOnly bool
	// Subscriptions are newest first.
	Subscriptions []Subscription
	// InFlight counts the deliveries to it awaiting its answer;
	// Requests its own requests running.
	InFlight int
	Requests int
	Slow     bool
	Timeouts int
}

// subscriptionsOf copies h's subscriptions, newest first. The caller
// holds h.mu.
func subscriptionsOf(h *holding) []Subscription {
	out := make([]Subscription, 0, len(h.subs))
	for _, sub := range h.subs {
		out = append(out, snapshotOf(sub))
	}
	slices.SortFunc(out, func(a, b Subscription) int { return cmp.Compare(b.Rank, a.Rank) })
	return out
}

func snapshotOf(sub *subscription) Subscription {
	return Subscription{Pattern: sub.pattern.String(), Policy: sub.policy, Fallback: sub.fallback, Rank: sub.seq}
}

// Clients returns this node's initialized connections and the other
// nodes' connections that hold subscriptions, in no order.
func (s *Server) Clients() []Client {
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	out := make([]Client, 0, len(conns))
	for _, c := range conns {
		c.activity.mu.Lock()
		inFlight := c.activity.inFlight
		c.activity.mu.Unlock()
		c.mu.Lock()
		if !c.initialized || c.closed {
			c.mu.Unlock()
			continue
		}
		out = append(out, Client{
			ClientID: c.clientID, Identity: c.identity, Node: s.cl.self, Local: true, Address: c.remote, Since: c.since,
			PublishOnly: c.publishOnly, Subscriptions: subscriptionsOf(&c.holding), InFlight: inFlight, Requests: len(c.slots),
			Slow: c.slow.Load(), Timeouts: int(c.timeouts.Load()),
		})
		c.mu.Unlock()
	}
	cl := s.cl
	cl.mu.Lock()
	for _, in := range cl.remotes {
		in.mu.Lock()
		out = append(out, Client{ClientID: in.clientID, Identity: in.identity, Node: in.peer.node, Subscriptions: subscriptionsOf(&in.holding)})
		in.mu.Unlock()
	}
	cl.mu.Unlock()
	return out
}

// A Link is one subscription of a topic's chain, and who holds it.
type Link struct {
	Subscription
	ClientID string
	Identity string
	Node     string
}

// A Route is what a message to a topic would meet now.
type Route struct {
	// Chain is the subscriptions that would take it, in the walk's
	// order.
	Chain []Link
	// Held says a message nobody takes is held for HoldLifetime
	// (Options.HoldPatterns), rather than refused.
	Held         bool
	HoldLifetime time.Duration
}

// Route returns the route a message to topic would take now.
func (s *Server) Route(topic string) Route {
	chain := s.router.route(topic)
	links := make([]Link, 0, len(chain))
	for _, sub := range chain {
		h := sub.to.held()
		h.mu.Lock()
		identity := h.identity
		h.mu.Unlock()
		node := s.cl.self
		if in, ok := sub.to.(*standIn); ok {
			node = in.peer.node
		}
		links = append(links, Link{Subscription: snapshotOf(sub), ClientID: h.clientID, Identity: identity, Node: node})
	}
	return Route{Chain: links, Held: s.sched.isHeld(topic), HoldLifetime: s.opts.HoldLifetime}
}

// Status is this node as an operator sees it.
type Status struct {
	ServerID string
	// Cluster and Node name the cluster and this node ("" for a bus on
	// its own); Nodes counts the live nodes, this one included.
	Cluster string
	Node    string
	Nodes   int
	// Auth says credentials are checked: the bus is not open.
	Auth bool
}

// Status returns this node's status.
func (s *Server) Status() Status {
	cluster, node := s.cl.cluster.Names()
	return Status{ServerID: s.opts.ServerID, Cluster: cluster, Node: node, Nodes: max(1, len(s.cl.cluster.Live())), Auth: s.auth.Load() != nil}
}

// Disconnect closes the connection of clientID to this node, with 1008
// and reason: an operator's action. When no such client is connected
// here it returns false, and the node of the cluster it is connected to,
// if any.
func (s *Server) Disconnect(clientID, reason string) (ok bool, elsewhere string) {
	s.mu.Lock()
	c := s.clients[clientID]
	s.mu.Unlock()
	if c == nil {
		if remote := s.cl.remoteStandIns(clientID); len(remote) > 0 {
			return false, remote[0].peer.node
		}
		return false, ""
	}
	c.close(websocket.StatusPolicyViolation, reason)
	return true, ""
}
