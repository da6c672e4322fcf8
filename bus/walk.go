package bus

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/internal/outbound"
	"github.com/bub-bus/bub/internal/rpcstream"
	"github.com/bub-bus/bub/protocol"
)

// A walk driven by answers
//
// A walk (see Server.walk for its rules) makes its deliveries to this
// node's connections without a goroutine each: the walker writes the
// processMessage call (rpcstream's CallAsync) and goes on to the next
// subscriber, and the answer, read on the subscriber's read loop, records
// the delivery's outcome there. Where a policy may stop the walk, the
// walker leaves (it parks) and the answer carries the walk on from the
// read loop that read it. One timer per walk ends the calls not answered
// within DeliveryTimeout. Whoever ends the walk's last delivery finishes
// the walk: it wakes the goroutine waiting in Server.walk, or, for a
// sendMessage relayed on the read loops (direct.go), settles it and
// answers the publisher itself.
//
// The walker may be a read loop, which must not wait. So a delivery whose
// turn has not come (a predecessor is still on its way, order.go), one to
// a connection whose queue has no room (its peer reads slowly), one to a
// subscriber on another node or to an away durable owner, and every
// delivery when middleware is on the path (middleware.go), is made as before by the delivery
// pipeline (pipeline.deliver) on a goroutine of its own, whose end is
// reported to the walk as an answer is. The calls a walker writes are
// queued on the subscribers' connections and held (outbound.Batch) until
// the walker's batch ends, at the read loop's next read from its socket
// or, on any other goroutine, when the walker leaves: each connection is
// written once per batch, and a fan-out to n connections costs n write
// calls made one after another, not n goroutines each waking to write.

// stepState is where one delivery of a walk stands; guarded by walk.mu.
type stepState uint8

const (
	// stepIdle: not invoked yet, made on a goroutine, or its call is
	// being written.
	stepIdle stepState = iota
	// stepWaiting: its call is written and waits for its answer, which
	// the walk's timer bounds.
	stepWaiting
	// stepDone: its outcome is recorded.
	stepDone
)

// walk is one routing pass of a message down its chain (Server.walk).
type walk struct {
	s        *Server
	m        *store.Message
	chain    []*subscription
	tickets  []ticket
	result   *protocol.SendMessageResult
	reliable bool
	prior    []store.Attempt
	steps    []walkStep
	outcomes []outcome
	// shared is the params every delivery of the walk shares, nil for a
	// walk of one subscriber.
	shared *sharedParams
	// out and req are the sendMessage relayed on the read loops that the
	// walk answers when it ends (direct.go); nil when a goroutine waits
	// in Server.walk on ended instead.
	out *outgoing
	req *rpcstream.Request
	// ended is closed when the walk ends, for Server.walk.
	ended chan struct{}
	// batch holds the calls written by a walker that is not a read loop,
	// until it leaves.
	batch outbound.Batch
	// A walk of one subscriber, the common relay, keeps its step here
	// rather than in slices of their own; a walk of several takes them
	// from scratch, which it gives back when its outcomes are settled
	// (release).
	oneStep    [1]walkStep
	oneOutcome [1]outcome
	scratch    *walkScratch

	// mu guards the fields below and every step's state and call.
	mu sync.Mutex
	// next is the next subscriber to invoke; made is how many the walk
	// invokes: the chain's length until a policy stops it.
	next, made int
	// running counts the deliveries invoked and not ended yet.
	running int
	// waitFor is the delivery whose answer the walk waits for before it
	// goes on (its policy may stop the walk), -1 when none; parked is set
	// once the walker has left, so that the answer carries the walk on.
	waitFor int
	parked  bool
	// invoked is set once every delivery the walk makes is invoked;
	// finished once the walk has finished (finish), after which its
	// timer touches no step: the steps may be another walk's.
	invoked, finished bool
	// timer ends the calls past DeliveryTimeout; timerIdle is set while
	// it is not armed. timed is the first delivery it may have to end.
	timer     *time.Timer
	timerIdle bool
	timed     int
}

// walkStep is one delivery of a walk: the rpcstream.Answerer of its call.
type walkStep struct {
	w *walk
	i int
	d delivery
	// c is the subscriber's connection when the walk makes the call
	// itself; set before the call is written, as is entered once every
	// delivery layer let the call through.
	c       *conn
	entered bool
	state   stepState
	// call is the call's id on c's Stream while it waits.
	call uint64
}

// newWalk prepares the walk of m down chain, with its tickets (nil when it
// keeps no publisher's order), into result. sc, when not nil, is the
// scratch its tickets were taken from, for a walk of several subscribers;
// else it takes one of its own.
func (s *Server) newWalk(m *store.Message, chain []*subscription, tickets []ticket, result *protocol.SendMessageResult, reliable bool, prior []store.Attempt, sc *walkScratch) *walk {
	w := &walk{s: s, m: m, chain: chain, tickets: tickets, result: result, reliable: reliable, prior: prior, made: len(chain), waitFor: -1}
	if len(chain) == 1 {
		w.steps, w.outcomes = w.oneStep[:], w.oneOutcome[:]
	} else {
		// Kept from walk to walk rather than allocated, not even once
		// per walk: a fan-out to 1,000 allocated 240 KB of them.
		if sc == nil {
			sc = getWalkScratch(len(chain))
		}
		w.scratch = sc
		w.steps, w.outcomes = w.scratch.steps[:len(chain)], w.scratch.outcomes[:len(chain)]
		// Every delivery of the walk sends the same params but for the
		// subscription pattern: encoded once.
		w.shared = newSharedParams(m)
	}
	for i, sub := range chain {
		st := &w.steps[i]
		st.w, st.i = w, i
		st.d = delivery{Message: m, ClientID: sub.to.held().clientID, Subscription: sub.pattern.String(), Attempt: 1, to: sub.to, shared: w.shared}
		if tickets != nil {
			st.d.turn = &tickets[i]
		}
	}
	return w
}

// walkScratch is the memory of a walk of several subscribers that lasts
// only as long as the walk: its steps, its outcomes and, for a walk
// relayed on the read loops, whose result is encoded as soon as it is
// settled, its acks and the publisher's tickets (taken by route). Kept in
// walkScratchPool between walks.
type walkScratch struct {
	steps    []walkStep
	outcomes []outcome
	acks     []protocol.Ack
	tickets  []ticket
}

// walkScratchPool holds the walkScratch of walks that have ended.
var walkScratchPool sync.Pool

// getWalkScratch returns a walkScratch with room for n steps and outcomes,
// each zero.
func getWalkScratch(n int) *walkScratch {
	sc, _ := walkScratchPool.Get().(*walkScratch)
	if sc == nil {
		sc = new(walkScratch)
	}
	if cap(sc.steps) < n {
		sc.steps, sc.outcomes = make([]walkStep, n), make([]outcome, n)
	}
	return sc
}

// release gives the walk's scratch back once nothing reads its steps,
// outcomes or acks any more: the walk has finished and its outcomes are
// settled. What they point to is cleared, so that the pool keeps no
// message, connection or answer alive.
func (w *walk) release() {
	sc := w.scratch
	if sc == nil {
		return
	}
	clear(w.steps)
	clear(w.outcomes)
	clear(sc.acks)
	clear(sc.tickets)
	sc.acks, sc.tickets = sc.acks[:0], sc.tickets[:0]
	w.scratch, w.steps, w.outcomes = nil, nil, nil
	walkScratchPool.Put(sc)
}

// advance invokes the chain's subscribers from the walk's next one on,
// until one whose answer the walk waits for, or the end of the chain. b is
// the batch of the read loop it runs on, nil on any other goroutine: the
// walk's own batch is used there, released when advance returns.
func (w *walk) advance(b *outbound.Batch) {
	if b == nil {
		b = &w.batch
		defer w.batch.Flush()
	}
	for {
		w.mu.Lock()
		if w.waitFor >= 0 {
			w.parked = true
			w.mu.Unlock()
			return
		}
		i := w.next
		if i > 0 {
			if policy := w.chain[i-1].policy; policy.MayStop() && w.outcomes[i-1].stops(policy) {
				w.made = i
			}
		}
		if i == w.made {
			w.invoked = true
			last := w.running == 0
			w.mu.Unlock()
			if last {
				w.finish(b)
			}
			return
		}
		w.next++
		w.running++
		if w.chain[i].policy.MayStop() {
			w.waitFor = i
		}
		w.mu.Unlock()
		w.invoke(&w.steps[i], b)
	}
}

// invoke makes st's delivery: the call itself when nothing in it may wait
// (see above), else the delivery pipeline's on a goroutine.
func (w *walk) invoke(st *walkStep, b *outbound.Batch) {
	s := w.s
	c, ok := st.d.to.(*conn)
	if !ok || s.intercepted || s.opts.viaPipeline || (st.d.turn != nil && !st.d.turn.ready()) ||
		!c.out.HasRoom(frameRoom+len(w.m.Payload)+len(w.m.Meta)) {
		go func() {
			s.deliverInTurn(&st.d, &w.outcomes[st.i])
			w.stepDone(st, nil)
		}()
		return
	}
	st.c = c
	w.call(st, b)
}

// call writes st's processMessage call to its connection, queued in b,
// inside the delivery layers (pipeline.layers, entered here and left when
// the call ends; the timeout is the walk's timer), and gives its turn on
// once it is written.
func (w *walk) call(st *walkStep, b *outbound.Batch) {
	s, d, o := w.s, &st.d, &w.outcomes[st.i]
	sent := false
	defer func() {
		if d.turn != nil {
			d.turn.pass()
		}
		// As deliverInTurn: a panic is the delivery's failure, not the
		// bus's end. Once the call is written its answer ends it.
		if p := recover(); p != nil {
			if err := s.deliveryPanicked(d, p); !sent {
				w.callDone(st, protocol.ProcessMessageResult{}, err, b)
			}
		}
	}()
	o.at = time.Now()
	if err := s.pipe.enterLayers(st.c, d); err != nil {
		sent = true
		w.callDone(st, protocol.ProcessMessageResult{}, err, b)
		return
	}
	st.entered = true
	b.Hold(st.c.out)
	id, err := st.c.stream.CallAsync(protocol.MethodProcessMessage, d, st)
	sent = true
	if d.turn != nil {
		d.turn.pass()
	}
	if err != nil {
		res, derr := s.pipe.callResult(nil, err)
		w.callDone(st, res, derr, b)
		return
	}
	w.mu.Lock()
	if st.state == stepIdle {
		// Not answered yet: the timer bounds the wait.
		st.state, st.call = stepWaiting, id
		w.armLocked(o.at.Add(s.opts.DeliveryTimeout))
	}
	w.mu.Unlock()
}

// Answer takes the answer to st's call, on the subscriber's read loop.
func (st *walkStep) Answer(raw json.RawMessage, err error) {
	res, derr := st.w.s.pipe.callResult(raw, err)
	st.w.callDone(st, res, derr, st.c.out.Batch())
}

// armLocked makes the timer fire at deadline, unless it is armed already
// (for an earlier call, whose firing arms it again for the next).
func (w *walk) armLocked(deadline time.Time) {
	switch {
	case w.timer == nil:
		w.timer = time.AfterFunc(time.Until(deadline), w.timedOut)
	case w.timerIdle:
		w.timerIdle = false
		w.timer.Reset(time.Until(deadline))
	}
}

// timedOut ends the calls that waited DeliveryTimeout for their answers,
// and arms the timer for the next one due. Calls become due in the order
// they were written, which is the chain's.
func (w *walk) timedOut() {
	timeout := w.s.opts.DeliveryTimeout
	now := time.Now()
	// What is due is noted by value: a due call answered meanwhile may
	// end the walk, whose steps may then be another walk's. One that
	// Abandon takes back is no longer answered, so its walk cannot end
	// before callDone, and its step stays the walk's.
	type dueCall struct {
		st   *walkStep
		c    *conn
		call uint64
	}
	var due []dueCall
	w.mu.Lock()
	if w.finished {
		// Fired as the walk finished: its steps may be another's now.
		w.mu.Unlock()
		return
	}
	w.timerIdle = true
	for i := w.timed; i < w.next; i++ {
		st := &w.steps[i]
		if st.state == stepDone && i == w.timed {
			w.timed++
		}
		if st.state != stepWaiting {
			continue
		}
		if left := w.outcomes[i].at.Add(timeout).Sub(now); left > 0 {
			w.timerIdle = false
			w.timer.Reset(left)
			break
		}
		due = append(due, dueCall{st, st.c, st.call})
	}
	s := w.s
	w.mu.Unlock()
	for _, d := range due {
		if d.c.stream.Abandon(d.call) {
			res, err := s.pipe.callResult(nil, context.DeadlineExceeded)
			w.callDone(d.st, res, err, nil)
		}
	}
}

// callDone ends st's call, unless it has ended already, with its answer
// or its failure, as the pipeline does after the call (pipeline.layered,
// pipeline.measure): it leaves the layers if they were entered and
// measures the delivery, but for one the bus panicked in, which a walk
// does not measure. b is the batch of the read loop it runs on, nil on
// any other goroutine.
func (w *walk) callDone(st *walkStep, res protocol.ProcessMessageResult, err error, b *outbound.Batch) {
	w.mu.Lock()
	if st.state == stepDone {
		w.mu.Unlock()
		return
	}
	st.state = stepDone
	w.mu.Unlock()
	s, d, o := w.s, &st.d, &w.outcomes[st.i]
	func() {
		defer func() {
			if p := recover(); p != nil {
				res, err = protocol.ProcessMessageResult{}, s.deliveryPanicked(d, p)
			}
		}()
		if st.entered {
			s.pipe.leaveLayers(st.c, d, len(s.pipe.layers), err)
		}
		if err != errPanicked {
			s.pipe.measured(d, o.at, res, err)
		}
	}()
	o.result, o.err = res, err
	w.stepDone(st, b)
}

// stepDone notes that st's delivery has ended, its outcome recorded: the
// walk goes on here if it waited for it and its walker has left, and
// finishes here if it was the last.
func (w *walk) stepDone(st *walkStep, b *outbound.Batch) {
	w.mu.Lock()
	w.running--
	goOn := false
	if w.waitFor == st.i {
		w.waitFor = -1
		goOn, w.parked = w.parked, false
	}
	last := w.invoked && w.running == 0
	w.mu.Unlock()
	switch {
	case goOn:
		w.advance(b)
	case last:
		w.finish(b)
	}
}

// finish ends a walk whose every delivery has ended: the deliveries it did
// not make give their turns on, and the message is settled, by the
// goroutine waiting in Server.walk or here (direct.go).
func (w *walk) finish(b *outbound.Batch) {
	w.mu.Lock()
	w.finished = true
	if w.timer != nil {
		w.timer.Stop()
	}
	w.mu.Unlock()
	for i := w.made; i < len(w.tickets); i++ {
		w.tickets[i].pass()
	}
	if w.shared != nil {
		// Every frame that used them is written.
		w.shared.release()
	}
	if w.out != nil {
		w.answer(b)
		return
	}
	close(w.ended)
}
