package bus

import (
	"context"
	"encoding/json"
	"sync"
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

// directRelay is one sendMessage relayed on the read loops.
type directRelay struct {
	pub, sub *conn
	req      *rpcstream.Request
	out      *outgoing
	result   *protocol.SendMessageResult
	d        delivery
	// o is the delivery's outcome, as settle takes a walk's.
	o [1]outcome

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
	if !ok || sub.slow.Load() || !out.tickets[0].ready() {
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
	sent := false
	defer func() {
		// As guard: a panic answers the request, not the process. Once
		// the call is sent, its answer settles the relay.
		if p := recover(); p != nil {
			relayed = true
			if !sent {
				r.refuse(c.panicked(req, p))
			}
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
	r.o[0].at = time.Now()
	if err := s.slowRefusal(sub, &r.d); err != nil {
		out.pass()
		sent = true
		r.finish(protocol.ProcessMessageResult{}, err, false, c.out.Batch())
		return true
	}
	if m.From != s.opts.ServerID {
		s.countDelivery(sub, r.d.ClientID, 1)
	}
	c.out.Batch().Hold(sub.out)
	r.mu.Lock()
	id, err := sub.stream.CallAsync(protocol.MethodProcessMessage, &r.d, r)
	out.pass()
	sent = true
	if err == nil {
		r.call = id
		r.timer = time.AfterFunc(s.opts.DeliveryTimeout, r.timedOut)
	}
	r.mu.Unlock()
	if err != nil {
		res, derr := s.callResult(nil, err)
		r.finish(res, derr, true, c.out.Batch())
	}
	return true
}

// Answer takes the subscriber's answer, on its read loop.
func (r *directRelay) Answer(raw json.RawMessage, err error) {
	r.mu.Lock()
	t := r.timer
	r.mu.Unlock()
	t.Stop()
	res, derr := r.pub.server.callResult(raw, err)
	r.finish(res, derr, true, r.sub.out.Batch())
}

// timedOut ends the call when no answer came within DeliveryTimeout.
func (r *directRelay) timedOut() {
	r.mu.Lock()
	id := r.call
	r.mu.Unlock()
	if !r.sub.stream.Abandon(id) {
		return // answered meanwhile
	}
	res, err := r.pub.server.callResult(nil, context.DeadlineExceeded)
	r.finish(res, err, true, nil)
}

// finish records the delivery's outcome as the delivery layers do
// (Server.chain: measure, skipSlow, track; made is false when skipSlow
// refused it) and settles the relay: here, writing the result in b when
// it is not nil, or on a goroutine when the store is to be written.
func (r *directRelay) finish(res protocol.ProcessMessageResult, err error, made bool, b *outbound.Batch) {
	s := r.pub.server
	if made {
		if r.d.Message.From != s.opts.ServerID {
			s.countDelivery(r.sub, r.d.ClientID, -1)
		}
		s.noteAttempt(r.sub, &r.d, err)
	}
	s.measured(&r.d, r.o[0].at, res, err)
	r.o[0].result, r.o[0].err = res, err
	if err != nil || res.ShouldRetry || res.Rejected() || (b != nil && !r.pub.out.HasRoom(frameRoom+len(res.Message))) {
		// The store is to be written, or the publisher reads slowly.
		go r.settle(nil)
		return
	}
	r.settle(b)
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
		pub.reply(r.req, nil, err)
	} else {
		pub.reply(r.req, r.result, nil)
	}
	s.requests.Done()
	<-pub.slots
}

// refuse answers a relay that was not made with err.
func (r *directRelay) refuse(err error) {
	r.out.pass()
	r.pub.reply(r.req, nil, err)
	r.pub.server.requests.Done()
	<-r.pub.slots
}
