package bus

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bub-bus/bub/internal/outbound"
	"github.com/bub-bus/bub/internal/rpcstream"
	"github.com/bub-bus/bub/protocol"
)

// Relaying on the read loop
//
// A sendMessage to one subscriber connection, the relay that carries most
// traffic, is handled where it is read, as NATS handles every message of
// a read: the publisher's read loop routes it and queues the
// processMessage call on the subscriber's connection, and the subscriber's
// read loop, when the answer comes, queues the publisher's result on the
// publisher's connection. Each read loop holds the connections it queued
// on (outbound.Batch) and releases them before its next read from the
// socket, so a batch of requests read together leaves in one write call
// per connection, and a lone one at the end of its own handling. No
// goroutine is started and none waits per message.
//
// Whatever may wait stays off the read loops: a message whose turn at its
// subscriber has not come (a predecessor is still on its way), one that
// goes to several subscribers or to another node, or that carries an
// idempotency key, is published by a goroutine of its own (handle); an
// answer that calls for a retry, a dead letter or a hold is settled on
// one, since those are written to the store; and a read loop queues
// nothing on a connection whose queue has no room (its peer reads
// slowly), since it would wait for room. The timeout of the call runs on
// a timer; a held connection is released without waiting on its peer
// (outbound.Batch).

// frameRoom is more than a processMessage frame or a sendMessage result
// takes besides the payload, meta and message: the room a read loop wants
// in a connection's queue before it queues one there, since it must not
// wait for room.
const frameRoom = 1024

// directRelay is one sendMessage relayed on the read loops. Its delivery
// goes through the same layers as the chain's (Server.layers), entered on
// the publisher's read loop and left where the attempt ends.
type directRelay struct {
	pub, sub *conn
	req      *rpcstream.Request
	out      *outgoing
	result   *protocol.SendMessageResult
	d        delivery
	// o is the delivery's outcome, as settle takes a walk's.
	o [1]outcome
	// entered is set once every layer let the attempt through, before
	// the call is sent: the attempt's end leaves them.
	entered bool
	// ended is set by the attempt's first end, which settles the relay;
	// a later one (an answer to a call whose sending panicked) changes
	// nothing.
	ended atomic.Bool

	// mu guards call and timer, which the publisher's read loop sets
	// while the answer may already be read by the subscriber's.
	mu    sync.Mutex
	call  uint64
	timer *time.Timer
}

// relayDirect relays a routed sendMessage on the read loop when nothing
// in it may wait (see above), and reports whether it did; if not, the
// caller publishes it as before. It runs on the publisher's read loop
// with a slot and a running request taken, which the relay gives back.
func (c *conn) relayDirect(req *rpcstream.Request, out *outgoing) (relayed bool) {
	s := c.server
	if out.callback != "" || len(out.chain) != 1 || s.tracer != nil {
		return false
	}
	sub, ok := out.chain[0].to.(*conn)
	if !ok || !out.tickets[0].ready() {
		return false
	}
	if !sub.out.HasRoom(frameRoom + len(out.message.Payload) + len(out.message.Meta)) {
		// The subscriber reads slowly: the call would wait for room.
		return false
	}
	if key, err := idempotencyKeyOf(out.message.Meta); key != "" || err != nil {
		return false
	}
	r := &directRelay{pub: c, sub: sub, req: req, out: out}
	attempted := false
	defer func() {
		// As guard: a panic answers the request, not the process; once
		// the delivery is attempted, it is the delivery's failure, as in
		// a walk (deliverInTurn).
		if p := recover(); p != nil {
			relayed = true
			if !attempted {
				r.refuse(c.panicked(req, p))
				return
			}
			out.pass()
			r.fail(s.deliveryPanicked(&r.d, p), c.out.Batch())
		}
	}()
	if err := out.admit(); err != nil {
		r.refuse(err)
		return true
	}
	out.accepted()
	m := &out.message
	result, err := s.routed(m, out.chain, true)
	if err != nil {
		r.refuse(err)
		return true
	}
	r.result = result
	r.d = delivery{Message: m, ClientID: sub.clientID, Subscription: out.chain[0].pattern.String(), Attempt: 1, to: sub}
	attempted = true
	r.o[0].at = time.Now()
	if err := s.enterLayers(sub, &r.d); err != nil {
		out.pass()
		r.fail(err, c.out.Batch())
		return true
	}
	r.entered = true
	c.out.Batch().Hold(sub.out)
	err = r.send()
	out.pass()
	if err != nil {
		r.answered(nil, err, c.out.Batch())
	}
	return true
}

// send writes the processMessage call and starts its timeout, the
// chain's (Server.timeout) in the form of a timer, since no goroutine
// waits for the answer.
func (r *directRelay) send() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	id, err := r.sub.stream.CallAsync(protocol.MethodProcessMessage, &r.d, r)
	if err != nil {
		return err
	}
	r.call = id
	r.timer = time.AfterFunc(r.pub.server.opts.DeliveryTimeout, r.timedOut)
	return nil
}

// Answer takes the subscriber's answer, on its read loop.
func (r *directRelay) Answer(raw json.RawMessage, err error) {
	r.mu.Lock()
	t := r.timer
	r.mu.Unlock()
	if t != nil { // nil only when sending panicked, and the attempt ended
		t.Stop()
	}
	r.answered(raw, err, r.sub.out.Batch())
}

// timedOut ends the call when no answer came within DeliveryTimeout, as
// the Stream ends a Call whose context ends.
func (r *directRelay) timedOut() {
	r.mu.Lock()
	id := r.call
	r.mu.Unlock()
	if !r.sub.stream.Abandon(id) {
		return // answered meanwhile
	}
	r.answered(nil, context.DeadlineExceeded, nil)
}

// answered ends the attempt with the call's answer raw, or its failure
// err, as the Stream gives them; see finish for b.
func (r *directRelay) answered(raw json.RawMessage, err error, b *outbound.Batch) {
	if !r.ended.CompareAndSwap(false, true) {
		return
	}
	func() {
		defer r.recoverAttempt()
		r.o[0].result, r.o[0].err = r.pub.server.callResult(raw, err)
	}()
	r.finish(b)
}

// fail ends the attempt with err, with no answer to wait for: a layer's
// refusal, or errPanicked.
func (r *directRelay) fail(err error, b *outbound.Batch) {
	if !r.ended.CompareAndSwap(false, true) {
		return
	}
	r.o[0].err = err
	r.finish(b)
}

// finish completes the ended attempt as the chain does after the call:
// it leaves the layers, if they were entered, and measures the delivery
// (Server.layered, Server.measure), but for one the bus panicked in, which
// a walk does not measure either. Then it settles the relay: here,
// writing the result in b when b is not nil, or on a goroutine when the
// store is to be written or the publisher reads slowly.
func (r *directRelay) finish(b *outbound.Batch) {
	s, o := r.pub.server, &r.o[0]
	func() {
		defer r.recoverAttempt()
		if r.entered {
			s.leaveLayers(r.sub, &r.d, len(s.layers), o.err)
		}
		if o.err != errPanicked {
			s.measured(&r.d, o.at, o.result, o.err)
		}
	}()
	if o.err != nil || o.result.ShouldRetry || o.result.Rejected() || (b != nil && !r.pub.out.HasRoom(frameRoom+len(o.result.Message))) {
		go r.settle(nil)
		return
	}
	r.settle(b)
}

// recoverAttempt, deferred, makes a panic the attempt's failure, as a
// walk does (deliverInTurn).
func (r *directRelay) recoverAttempt() {
	if p := recover(); p != nil {
		r.o[0].result, r.o[0].err = protocol.ProcessMessageResult{}, r.pub.server.deliveryPanicked(&r.d, p)
	}
}

// settle completes the result as a walk does and answers the publisher.
func (r *directRelay) settle(b *outbound.Batch) {
	pub, s := r.pub, r.pub.server
	var err error
	func() {
		defer func() {
			if p := recover(); p != nil {
				err = pub.panicked(r.req, p)
			}
		}()
		s.settle(&r.out.message, r.out.chain, r.o[:], r.result, true, nil)
	}()
	if b != nil {
		b.Hold(pub.out)
	}
	if err != nil {
		pub.finishRequest(r.req, nil, err)
	} else {
		pub.finishRequest(r.req, r.result, nil)
	}
}

// refuse answers a relay that was not attempted with err.
func (r *directRelay) refuse(err error) {
	r.out.pass()
	r.pub.finishRequest(r.req, nil, err)
}
