package cluster

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/bub-bus/bub/protocol"
)

// Requests from one node to another (deliveries, surveys) go
// over core NATS to the other's subject, bub.node.<node>.<what>, and are
// answered on this node's reply inbox with a status byte (responseOK
// and the handler's result, or responseError and its error's text).
// Both kinds are asked with ask and answered with respond.

// ask sends m to node (m.Subject is one of node's) and returns the
// result its handler answered with. failed is what a handler's error is
// reported as, with its text; sent, if set, is called once the request
// is sent, before the answer; where names the request in errors, as
// "node b (conn 3 of "x")", called only for one (deliveries are the hot
// path).
//
// Not nats.Conn.Request: it says nothing between sending and the answer,
// and a caller's next delivery to the same subscriber must wait only
// until this one is sent, not answered.
//
// Errors: ErrNodeGone when no node serves the subject (it died or left,
// or never was); ErrDeliveryTimeout when ctx ended first (the node may
// have died meanwhile); failed; ErrBadFrame for an answer that does not
// parse; ErrClosed after Close.
func (n *Node) ask(ctx context.Context, node string, m *nats.Msg, failed error, sent func(), where func() string) ([]byte, error) {
	if n.closed.Load() {
		return nil, fmt.Errorf("%w: %s", ErrClosed, where())
	}
	if !protocol.ValidNodeID(node) {
		return nil, fmt.Errorf("cluster: %s: %q is not a node id", where(), node)
	}
	subject, answer, forget := n.replies.expect()
	defer forget()
	m.Reply = subject
	if err := n.nc.PublishMsg(m); err != nil {
		if errors.Is(err, nats.ErrConnectionClosed) {
			return nil, fmt.Errorf("%w: %s", ErrClosed, where())
		}
		return nil, fmt.Errorf("cluster: %s: %w", where(), err)
	}
	if sent != nil {
		sent()
	}
	var resp *nats.Msg
	select {
	case resp = <-answer:
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: %s: %w", ErrDeliveryTimeout, where(), ctx.Err())
	}
	if len(resp.Data) == 0 && resp.Header.Get("Status") == noRespondersStatus {
		return nil, fmt.Errorf("%w: %s", ErrNodeGone, where())
	}
	if len(resp.Data) == 0 {
		return nil, fmt.Errorf("%w: %s: empty answer", ErrBadFrame, where())
	}
	switch resp.Data[0] {
	case responseOK:
		return resp.Data[1:], nil
	case responseError:
		return nil, fmt.Errorf("%w: %s: %s", failed, where(), resp.Data[1:])
	}
	return nil, fmt.Errorf("%w: %s: answer status %d", ErrBadFrame, where(), resp.Data[0])
}

// respond answers request m with a handler's result, or with its
// error's text when err is set. An answer that cannot be sent (NATS
// gone) is the asker's timeout.
func respond(m *nats.Msg, result []byte, err error) {
	if err != nil {
		_ = m.Respond(append([]byte{responseError}, err.Error()...))
		return
	}
	// One allocation for status and result; the result may be large.
	resp := make([]byte, 1+len(result))
	resp[0] = responseOK
	copy(resp[1:], result)
	_ = m.Respond(resp)
}

// noRespondersStatus is the status the NATS server answers a request
// with when nobody subscribes to its subject (the node is not running).
const noRespondersStatus = "503"

// replies routes the answers to this node's requests (ask) to their
// callers: one subscription to the node's inbox prefix, one channel per
// request waiting.
type replies struct {
	prefix string
	// mu guards the fields below.
	mu      sync.Mutex
	next    uint64
	waiting map[string]chan *nats.Msg
}

// expect registers a request: its reply subject, the channel its answer
// arrives on, and forget, to call once it is no longer waited for.
func (r *replies) expect() (subject string, answer <-chan *nats.Msg, forget func()) {
	ch := make(chan *nats.Msg, 1)
	r.mu.Lock()
	r.next++
	token := strconv.FormatUint(r.next, 36)
	r.waiting[token] = ch
	r.mu.Unlock()
	return r.prefix + token, ch, func() {
		r.mu.Lock()
		delete(r.waiting, token)
		r.mu.Unlock()
	}
}

// saw hands an answer to the request waiting for it; an answer nobody
// waits for any more (its caller timed out) is dropped.
func (r *replies) saw(m *nats.Msg) {
	token := m.Subject[len(r.prefix):]
	r.mu.Lock()
	ch := r.waiting[token]
	delete(r.waiting, token)
	r.mu.Unlock()
	if ch != nil {
		ch <- m
	}
}
