package cluster

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
)

// deliverSubject is where node takes delivery requests. Node ids are
// single subject tokens (Options.NodeID), so this is a literal subject.
func deliverSubject(node string) string { return "bub.node." + node + ".deliver" }

// Deliver asks node to deliver d to one of its connections and returns
// the result its Deliver handler gave, as is. ctx bounds the wait: give
// it the delivery timeout plus a margin, so that a subscriber's timeout
// is reported by the node that saw it.
//
// Errors: ErrNodeGone when no node serves the subject (it died or left:
// retry as for a subscriber that went away); ErrDeliveryTimeout when
// ctx ended first (the node may have died mid-delivery); ErrDeliveryFailed
// with the handler's error text; ErrClosed after Close.
func (n *Node) Deliver(ctx context.Context, node string, d *Delivery) ([]byte, error) {
	if n.closed.Load() {
		return nil, ErrClosed
	}
	if !validNodeID.MatchString(node) {
		return nil, fmt.Errorf("cluster: deliver to node %q: not a node id", node)
	}
	m := &nats.Msg{Subject: deliverSubject(node), Data: appendDelivery(nil, d)}
	resp, err := n.nc.RequestMsgWithContext(ctx, m)
	switch {
	case err == nil:
	case errors.Is(err, nats.ErrNoResponders):
		return nil, fmt.Errorf("%w: node %s (conn %d of %q)", ErrNodeGone, node, d.Conn, d.ClientID)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return nil, fmt.Errorf("%w: node %s (conn %d of %q): %w", ErrDeliveryTimeout, node, d.Conn, d.ClientID, err)
	case errors.Is(err, nats.ErrConnectionClosed):
		return nil, fmt.Errorf("%w: deliver to node %s", ErrClosed, node)
	default:
		return nil, fmt.Errorf("cluster: deliver to node %s (conn %d of %q): %w", node, d.Conn, d.ClientID, err)
	}
	if len(resp.Data) == 0 {
		return nil, fmt.Errorf("%w: empty response from node %s", ErrBadFrame, node)
	}
	switch resp.Data[0] {
	case responseOK:
		return resp.Data[1:], nil
	case responseError:
		return nil, fmt.Errorf("%w: node %s (conn %d of %q): %s", ErrDeliveryFailed, node, d.Conn, d.ClientID, resp.Data[1:])
	}
	return nil, fmt.Errorf("%w: response status %d from node %s", ErrBadFrame, resp.Data[0], node)
}

// startDeliveryService subscribes to this node's delivery subject, and to
// sync requests.
func (n *Node) startDeliveryService() error {
	s, err := n.nc.Subscribe(deliverSubject(n.id), n.handleDelivery)
	if err != nil {
		return fmt.Errorf("subscribe %s: %w", deliverSubject(n.id), err)
	}
	n.natsSubs = append(n.natsSubs, s)
	return n.startSyncService()
}

// handleDelivery runs the Deliver handler for one request on its own
// goroutine: a handler waits for a subscriber's answer, and the
// subscription's one dispatch goroutine must go on to the next request.
func (n *Node) handleDelivery(m *nats.Msg) {
	d, err := parseDelivery(m.Data)
	if err != nil {
		n.log.Warn("cluster: malformed delivery request", "err", err)
		_ = m.Respond(append([]byte{responseError}, err.Error()...))
		return
	}
	started := n.goFunc(func() {
		var result []byte
		err := errors.New("this node delivers to no one (no Deliver handler)")
		if n.opts.Deliver != nil {
			result, err = n.opts.Deliver(n.ctx, d)
		}
		if err != nil {
			_ = m.Respond(append([]byte{responseError}, err.Error()...))
			return
		}
		// One allocation for status and result; the result may be large.
		resp := make([]byte, 1+len(result))
		resp[0] = responseOK
		copy(resp[1:], result)
		_ = m.Respond(resp)
	})
	if !started {
		_ = m.Respond(append([]byte{responseError}, ErrClosed.Error()...))
	}
}
