package cluster

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// deliverSubject is where node takes delivery requests. Node ids are
// single subject tokens (Options.NodeID), so this is a literal subject.
func deliverSubject(node string) string { return "bub.node." + node + ".deliver" }

// Deliver asks node to deliver d to one of its connections and returns
// the result its Deliver handler gave, as is. ctx bounds the wait: give
// it the delivery timeout plus a margin, so that a subscriber's timeout
// is reported by the node that saw it. d.Sent, if set, is called once
// the request is sent, before the answer: requests sent in turn reach
// the subscriber in that order (see Delivery.Written).
//
// Errors: ErrNodeGone when no node serves the subject (it died or left:
// retry as for a subscriber that went away); ErrDeliveryTimeout when
// ctx ended first (the node may have died mid-delivery); ErrDeliveryFailed
// with the handler's error text; ErrClosed after Close.
func (n *Node) Deliver(ctx context.Context, node string, d *Delivery) ([]byte, error) {
	m := &nats.Msg{Subject: deliverSubject(node), Data: appendDelivery(nil, d)}
	if !d.Deadline.IsZero() {
		left := max(time.Until(d.Deadline).Microseconds(), 0)
		m.Header = nats.Header{timeLeftHeader: []string{strconv.FormatInt(left, 10)}}
	}
	return n.ask(ctx, node, m, ErrDeliveryFailed, d.Sent, func() string {
		return fmt.Sprintf("delivery to node %s (conn %d of %q)", node, d.Conn, d.ClientID)
	})
}

// timeLeftHeader carries a delivery's Deadline as the microseconds left
// when it was sent. A header, not a frame field: a node that does not
// know it ignores it.
const timeLeftHeader = "Bub-Time-Left-Us"

// inbound keeps the requests this node handles in order per target
// connection: a connection's next request goes to the handler once the
// one before is written to the subscriber (Delivery.Written) or done.
// Requests for other connections do not wait on a slow one.
type inbound struct {
	// mu guards by.
	mu sync.Mutex
	by map[uint64]*inboundLane
}

type inboundLane struct {
	queue []inboundRequest
}

type inboundRequest struct {
	d *Delivery
	m *nats.Msg
}

// startDeliveryService subscribes to this node's delivery subject and
// reply inbox, and to sync requests.
func (n *Node) startDeliveryService() error {
	n.replies.prefix = nats.NewInbox() + "."
	n.replies.waiting = make(map[string]chan *nats.Msg)
	n.inbound.by = make(map[uint64]*inboundLane)
	rs, err := n.nc.Subscribe(n.replies.prefix+"*", n.replies.saw)
	if err != nil {
		return fmt.Errorf("subscribe to the reply inbox: %w", err)
	}
	n.natsSubs = append(n.natsSubs, rs)
	s, err := n.nc.Subscribe(deliverSubject(n.id), n.handleDelivery)
	if err != nil {
		return fmt.Errorf("subscribe %s: %w", deliverSubject(n.id), err)
	}
	n.natsSubs = append(n.natsSubs, s)
	return n.startSyncService()
}

// handleDelivery queues one request on its connection's lane. It runs on
// the subscription's one dispatch goroutine, in the order the requests
// arrived, and never waits for a subscriber.
func (n *Node) handleDelivery(m *nats.Msg) {
	arrived := time.Now()
	d, err := parseDelivery(m.Data)
	if err == nil {
		d.Deadline, err = deadlineOf(m, arrived)
	}
	if err != nil {
		n.log.Warn("cluster: malformed delivery request", "err", err)
		respond(m, nil, err)
		return
	}
	in := &n.inbound
	in.mu.Lock()
	lane := in.by[d.Conn]
	idle := lane == nil
	if idle {
		lane = &inboundLane{}
		in.by[d.Conn] = lane
	}
	lane.queue = append(lane.queue, inboundRequest{d, m})
	in.mu.Unlock()
	if !idle {
		return
	}
	if !n.goFunc(func() { n.drainLane(d.Conn, lane) }) {
		n.failLane(d.Conn, lane)
	}
}

// deadlineOf reads a request's time left, counted from when it arrived;
// zero without one.
func deadlineOf(m *nats.Msg, arrived time.Time) (time.Time, error) {
	v := m.Header.Get(timeLeftHeader)
	if v == "" {
		return time.Time{}, nil
	}
	us, err := strconv.ParseInt(v, 10, 64)
	if err != nil || us < 0 {
		return time.Time{}, fmt.Errorf("%w: %s %q: want microseconds", ErrBadFrame, timeLeftHeader, v)
	}
	return arrived.Add(time.Duration(us) * time.Microsecond), nil
}

// drainLane hands a lane's requests to the handler one after another,
// each once the one before is written, and ends when the lane is empty.
func (n *Node) drainLane(conn uint64, lane *inboundLane) {
	in := &n.inbound
	for {
		in.mu.Lock()
		if len(lane.queue) == 0 {
			delete(in.by, conn)
			in.mu.Unlock()
			return
		}
		r := lane.queue[0]
		lane.queue[0] = inboundRequest{}
		lane.queue = lane.queue[1:]
		in.mu.Unlock()
		written := make(chan struct{})
		var once sync.Once
		r.d.Written = func() { once.Do(func() { close(written) }) }
		if !n.goFunc(func() {
			defer r.d.Written()
			n.serveDelivery(r)
		}) {
			respond(r.m, nil, ErrClosed)
			n.failLane(conn, lane)
			return
		}
		<-written
	}
}

// failLane answers every request left in a lane with ErrClosed: the node
// is closing.
func (n *Node) failLane(conn uint64, lane *inboundLane) {
	in := &n.inbound
	in.mu.Lock()
	left := lane.queue
	lane.queue = nil
	delete(in.by, conn)
	in.mu.Unlock()
	for _, r := range left {
		respond(r.m, nil, ErrClosed)
	}
}

// serveDelivery runs the Deliver handler for one request and answers it.
func (n *Node) serveDelivery(r inboundRequest) {
	if n.handler.Deliver == nil {
		respond(r.m, nil, errors.New("this node delivers to no one (no Deliver handler)"))
		return
	}
	result, err := n.handler.Deliver(n.ctx, r.d)
	respond(r.m, result, err)
}
