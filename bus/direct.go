package bus

import (
	"github.com/bub-bus/bub/internal/outbound"
	"github.com/bub-bus/bub/internal/rpcstream"
	"github.com/bub-bus/bub/protocol"
)

// Relaying on the read loop
//
// A sendMessage is handled where it is read, as NATS handles every
// message of a read: the publisher's read loop routes it and starts its
// walk there (walk.go), which queues the processMessage calls on the
// subscribers' connections; the answers, read on the subscribers' read
// loops, carry the walk on, and the read loop that reads the last one
// settles the message and queues the publisher's result on the
// publisher's connection. Each read loop holds the connections it queued
// on (outbound.Batch) and releases them before its next read from the
// socket, so a batch of requests read together leaves in one write call
// per connection, and a lone one at the end of its own handling. No
// goroutine is started and none waits per message or per delivery.
//
// Whatever may wait stays off the read loops: a message that carries an
// idempotency key, goes through middleware (middleware.go), or reaches nobody (it may be held) is
// published by a goroutine of its own (handle); the walk makes on a
// goroutine each delivery that may wait (walk.go); the settling of a
// message whose answers call for a retry, a dead letter or a hold runs on
// one, since those are written to the store; and a read loop queues
// nothing on a connection whose queue has no room (its peer reads
// slowly), since it would wait for room. A held connection is released
// without waiting on its peer (outbound.Batch).

// frameRoom is more than a processMessage frame or a sendMessage result
// takes besides the payload, meta and message: the room a read loop wants
// in a connection's queue before it queues one there, since it must not
// wait for room.
const frameRoom = 1024

// relayOnLoop starts the walk of a routed sendMessage on the read loop
// when nothing before its deliveries may wait (see above), and reports
// whether it did; if not, the caller publishes it as before. It runs on
// the publisher's read loop with a slot and a running request taken,
// which the walk gives back when it answers.
func (c *conn) relayOnLoop(req *rpcstream.Request, out *outgoing) (relayed bool) {
	s := c.server
	if out.callback != "" || len(out.chain) == 0 || s.intercepted {
		return false
	}
	if key, err := protocol.IdempotencyKeyOf(out.message.Meta); key != "" || err != nil {
		return false
	}
	started := false
	defer func() {
		// As guard: a panic answers the request, not the process. Once
		// the walk has started, its end answers it (a delivery's panic
		// is its failure, walk.go).
		if p := recover(); p != nil {
			relayed = true
			if err := c.panicked(req, p); !started {
				c.refuseRelay(req, out, err)
			}
		}
	}()
	if err := out.accept(); err != nil {
		c.refuseRelay(req, out, err)
		return true
	}
	m := &out.message
	result, err := s.routed(m, out.chain, true)
	if err != nil {
		c.refuseRelay(req, out, err)
		return true
	}
	w := s.newWalk(m, out.chain, out.tickets, result, true, nil, out.scratch)
	w.out, w.req = out, req
	started = true
	w.advance(c.out.Batch())
	return true
}

// refuseRelay answers a sendMessage whose walk was not started with err.
func (c *conn) refuseRelay(req *rpcstream.Request, out *outgoing, err error) {
	out.pass()
	c.finishRequest(req, nil, err)
}

// answer settles a walk relayed on the read loops and answers its
// publisher: here, queueing the result in b when it is not nil, or on a
// goroutine when the store is to be written or the publisher reads
// slowly.
func (w *walk) answer(b *outbound.Batch) {
	if b != nil && !w.settlesInMemory() {
		go w.answer(nil)
		return
	}
	pub, s := w.out.conn, w.s
	bp := paramsPool.Get().(*[]byte)
	body := (*bp)[:0]
	err := func() (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = pub.panicked(w.req, p)
			}
		}()
		if w.scratch != nil {
			// The result is encoded as soon as it is settled: its acks
			// can be the scratch's, kept from walk to walk.
			w.result.Acks = w.scratch.acks[:0]
			defer func() { w.scratch.acks, w.result.Acks = w.result.Acks, nil }()
		}
		s.settle(w.m, w.chain[:w.made], w.outcomes, w.result, true, nil)
		body = w.result.AppendJSON(body)
		return nil
	}()
	w.release()
	if err == nil && b != nil && !pub.out.HasRoom(frameRoom+len(body)) {
		// The publisher reads slowly: the write would wait for room.
		go w.reply(nil, nil, bp, body)
		return
	}
	w.reply(b, err, bp, body)
}

// reply answers the walk's publisher with err, or else with body, its
// result encoded in *bp, queued in b when b is not nil, as finishRequest
// does; then it gives the buffer back.
func (w *walk) reply(b *outbound.Batch, err error, bp *[]byte, body []byte) {
	pub := w.out.conn
	if err != nil {
		pub.finishRequest(w.req, nil, err)
	} else {
		if b != nil {
			b.Hold(pub.out)
		}
		pub.finishRequestRaw(w.req, body)
	}
	putParams(bp, body)
}

// settlesInMemory reports whether settling the walk writes nothing to the
// store: every delivery it made was answered, and none asked for a retry
// or rejected the message.
func (w *walk) settlesInMemory() bool {
	for _, o := range w.outcomes[:w.made] {
		if o.err != nil || o.result.ShouldRetry || o.result.Rejected() {
			return false
		}
	}
	return true
}
