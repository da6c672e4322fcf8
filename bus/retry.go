package bus

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/internal/backoff"
	"github.com/bub-bus/bub/protocol"
)

// backoff returns the delay before the next attempt, after attempts
// attempts: the subscriber's retry_seconds when it gave one, else
// exponential from RetryBaseDelay with jitter; both capped by
// RetryDelayCap.
func (q *scheduler) backoff(attempts int, retrySeconds float64) time.Duration {
	s := q.s
	if retrySeconds > 0 {
		return q.askedDelay(retrySeconds)
	}
	return backoff.Jitter(backoff.Exponential(s.opts.RetryBaseDelay, s.opts.RetryDelayCap, attempts-1))
}

// askedDelay is the delay a subscriber asked for in retry_seconds, capped
// by RetryDelayCap. The cap is applied before converting, so a huge value
// cannot overflow into a negative, uncapped delay.
func (q *scheduler) askedDelay(retrySeconds float64) time.Duration {
	s := q.s
	switch {
	case !(retrySeconds > 0):
		return 0
	case retrySeconds >= s.opts.RetryDelayCap.Seconds():
		return s.opts.RetryDelayCap
	}
	return time.Duration(retrySeconds * float64(time.Second))
}

// needsRetry reports whether an attempt's outcome asks for another one. A
// rejection does not, whatever its should_retry says.
func needsRetry(r protocol.ProcessMessageResult, err error) bool {
	return err != nil || (r.ShouldRetry && !r.Handled() && !r.Rejected())
}

// attemptError is what an attempt records: the failure, or the
// subscriber's own word when it asked for a retry or refused the
// message.
func attemptError(r protocol.ProcessMessageResult, err error) string {
	switch {
	case err != nil:
		return err.Error()
	case r.Rejected():
		return rejection(r)
	case r.Message != "":
		return "should_retry: " + r.Message
	}
	return "should_retry"
}

// rejection is what a refused attempt records: the subscriber's reason.
func rejection(r protocol.ProcessMessageResult) string {
	if r.Message == "" {
		return protocol.ReasonRejected
	}
	return protocol.ReasonRejected + ": " + r.Message
}

// scheduler runs pending work (retries and holds) when it is due. The
// store is the truth; the scheduler's heap mirrors what the store holds
// pending and is rebuilt from it on start. It keeps only the schedule:
// the message's payload and meta of stored work stay in the store until
// the work is due (guardAttempt loads them), so that a bus holding large
// messages does not hold them twice, or at all between attempts.
type scheduler struct {
	s    *Server
	wake chan struct{}
	// running bounds concurrent attempts.
	running chan struct{}
	// inflight counts running attempts, so Shutdown can wait for them.
	inflight sync.WaitGroup

	// mu guards the fields below.
	mu    sync.Mutex
	queue pendingHeap
	// holds indexes the queued holds by topic, and topics lists its keys
	// in order, so that a new subscription finds the holds it could take
	// without visiting the others: an exact pattern looks its topic up,
	// any other ranges over the topics that start with its literal head
	// (every topic it matches does; a glob with none scans them all).
	holds  map[string]map[*scheduled]struct{}
	topics []string
	// owners indexes the queued messages held for away durable
	// subscribers by clientId (durable_sub.go).
	owners  map[string]map[*scheduled]struct{}
	stopped bool
}

// scheduled is a queued piece of pending work.
type scheduled struct {
	p *store.Pending
	// index is its position in the heap, -1 once it has left it.
	index int
}

func newScheduler(s *Server) *scheduler {
	return &scheduler{s: s, wake: make(chan struct{}, 1), running: make(chan struct{}, 64),
		holds: make(map[string]map[*scheduled]struct{}), owners: make(map[string]map[*scheduled]struct{})}
}

// add queues p for its NextAt. p belongs to the scheduler from here on.
// Work the store holds (p.ID set) drops its payload and meta here; work
// the store refused keeps them, since memory is then its only copy.
func (q *scheduler) add(p *store.Pending) *scheduled {
	if p.ID != "" {
		p.Message.Payload, p.Message.Meta = nil, nil
	}
	e := &scheduled{p: p}
	// Only new first work changes when run must wake: otherwise its timer
	// is already set for work due no later than p. Every stored retry
	// comes through here, and a wake is a goroutine switch for nothing.
	if q.push(e) {
		q.poke()
	}
	return e
}

// push queues e and reports whether it is now the first work due. The
// lock is released by defer, as in wakeHolds: add runs under guard and
// guardAttempt, which recover panics.
func (q *scheduler) push(e *scheduled) (first bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	heap.Push(&q.queue, e)
	switch e.p.Kind {
	case store.KindHold:
		q.indexHold(e)
	case store.KindDurable:
		q.indexOwner(e)
	}
	return e.index == 0
}

func (q *scheduler) poke() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// indexHold adds e to the holds of its topic; q.mu is held.
func (q *scheduler) indexHold(e *scheduled) {
	topic := e.p.Message.Topic
	set, ok := q.holds[topic]
	if !ok {
		set = make(map[*scheduled]struct{})
		q.holds[topic] = set
		i, _ := slices.BinarySearch(q.topics, topic)
		q.topics = slices.Insert(q.topics, i, topic)
	}
	set[e] = struct{}{}
}

// unindexHold removes e from the holds of its topic; q.mu is held.
func (q *scheduler) unindexHold(e *scheduled) {
	topic := e.p.Message.Topic
	set := q.holds[topic]
	delete(set, e)
	if len(set) == 0 {
		delete(q.holds, topic)
		if i, ok := slices.BinarySearch(q.topics, topic); ok {
			q.topics = slices.Delete(q.topics, i, i+1)
		}
	}
}

// wakeHolds makes every held message whose topic pattern matches due now:
// client has just subscribed with it. A hold that client asked to wait is
// left alone: its own subscribing again (a reconnect, say) is no reason
// to ask it sooner than it said. Woken holds fall due at the same instant
// and so start in the order they were stored (pendingHeap), which is the
// order they were published in.
func (q *scheduler) wakeHolds(pattern *protocol.Pattern, client string) {
	if q.dueNow(pattern, client, time.Now()) {
		q.poke()
	}
}

// dueNow is wakeHolds under the scheduler's lock, which it releases by
// defer: subscribe runs it inside guard, which recovers a panic (in
// pattern matching, say), and a lock left held would stop every retry.
func (q *scheduler) dueNow(pattern *protocol.Pattern, client string, now time.Time) (woke bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	wake := func(topic string) {
		for e := range q.holds[topic] {
			if p := e.p; p.NextAt.After(now) && p.AskedBy != client {
				p.NextAt = now
				heap.Fix(&q.queue, e.index)
				woke = true
			}
		}
	}
	if pattern.Kind() == protocol.Exact {
		wake(pattern.String())
	} else {
		head := pattern.Literal()
		i, _ := slices.BinarySearch(q.topics, head)
		for _, topic := range q.topics[i:] {
			if !strings.HasPrefix(topic, head) {
				break
			}
			if pattern.Match(topic) {
				wake(topic)
			}
		}
	}
	return woke
}

// wakeHold makes the hold e due now, if it is still queued.
func (q *scheduler) wakeHold(e *scheduled) {
	now := time.Now()
	q.mu.Lock()
	woke := e.index >= 0 && e.p.NextAt.After(now)
	if woke {
		e.p.NextAt = now
		heap.Fix(&q.queue, e.index)
	}
	q.mu.Unlock()
	if woke {
		q.poke()
	}
}

// stop stops starting due work and waits for running attempts.
func (q *scheduler) stop() {
	q.mu.Lock()
	q.stopped = true
	q.mu.Unlock()
	q.poke()
	q.inflight.Wait()
}

// run starts due work until ctx ends or stop is called.
func (q *scheduler) run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		q.mu.Lock()
		if q.stopped {
			q.mu.Unlock()
			return
		}
		due, wait := q.next(time.Now())
		q.mu.Unlock()
		if due != nil {
			select {
			case q.running <- struct{}{}:
			case <-ctx.Done():
				return
			}
			q.mu.Lock()
			if q.stopped {
				q.mu.Unlock()
				<-q.running
				return
			}
			q.inflight.Add(1)
			q.mu.Unlock()
			go func() {
				defer func() { <-q.running; q.inflight.Done() }()
				q.s.guardAttempt(due)
			}()
			continue
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-q.wake:
		case <-timer.C:
		}
	}
}

// next takes the first work due at now off the queue, or, when none is,
// returns how long until some is; q.mu is held.
func (q *scheduler) next(now time.Time) (due *store.Pending, wait time.Duration) {
	if len(q.queue) == 0 {
		return nil, time.Hour
	}
	if d := q.queue[0].p.NextAt.Sub(now); d > 0 {
		return nil, d
	}
	e := heap.Pop(&q.queue).(*scheduled)
	switch e.p.Kind {
	case store.KindHold:
		q.unindexHold(e)
	case store.KindDurable:
		q.unindexOwner(e)
	}
	return e.p, 0
}

// pendingHeap orders pending work by NextAt, and work due at the same
// instant by store id, which is the order it was stored in.
type pendingHeap []*scheduled

func (h pendingHeap) Len() int { return len(h) }
func (h pendingHeap) Less(i, j int) bool {
	a, b := h[i].p, h[j].p
	if c := a.NextAt.Compare(b.NextAt); c != 0 {
		return c < 0
	}
	// Ids are zero-padded, so the shorter is the smaller once they
	// outgrow the padding.
	return len(a.ID) < len(b.ID) || len(a.ID) == len(b.ID) && a.ID < b.ID
}
func (h pendingHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *pendingHeap) Push(x any) {
	e := x.(*scheduled)
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *pendingHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.index = -1
	return e
}

// attempt runs one due retry or hold and settles its outcome in the store.
func (q *scheduler) attempt(p *store.Pending) {
	s := q.s
	if !q.loadMessage(p) {
		return
	}
	if p.Kind == store.KindHold {
		q.attemptHold(p)
		return
	}
	if p.Kind == store.KindDurable {
		s.durables.attemptDurable(p)
		return
	}
	number := len(p.Attempts) + 1
	c, pattern := q.findSubscriber(p.ClientID, p.Subscription, p.Message.Topic)
	if a, ok := c.(*absent); ok {
		// Its owner is away: held for it rather than tried.
		s.durables.holdRetry(p, a)
		return
	}
	if c == nil {
		s.metrics.retryAttempts.WithLabelValues(protocol.ReasonSubscriberGone).Inc()
		err := &deliveryError{Kind: protocol.ReasonSubscriberGone,
			Detail: fmt.Sprintf("client %q is not connected or no longer subscribes to a pattern matching %q", p.ClientID, p.Message.Topic)}
		s.observers.emitDelivery(&delivery{Message: &p.Message, ClientID: p.ClientID, Subscription: p.Subscription, Attempt: number}, protocol.ReasonSubscriberGone, err)
		q.retryOrDeadLetter(p, protocol.ProcessMessageResult{}, err)
		return
	}
	d := &delivery{Message: &p.Message, ClientID: p.ClientID, Subscription: pattern, Attempt: number, to: c}
	r, err := s.pipe.deliver(s.ctx, d)
	if err != nil && s.draining.Load() {
		// Perhaps cut off by the shutdown itself: not counted. The store
		// keeps the record as it was, and the next start tries again.
		return
	}
	switch {
	case !needsRetry(r, err) && r.Handled():
		s.metrics.retryAttempts.WithLabelValues("processed").Inc()
		q.forget(p, "drop delivered retry")
	case !needsRetry(r, err):
		// The subscriber asked for this retry and has now declined the
		// message for good; the publisher is long gone, so it is kept.
		s.metrics.retryAttempts.WithLabelValues(protocol.ReasonRejected).Inc()
		p.Attempts = append(p.Attempts, store.Attempt{At: time.Now(), Error: rejection(r)})
		q.deadLetter(p, protocol.ReasonRejected)
	default:
		s.metrics.retryAttempts.WithLabelValues("retry").Inc()
		q.retryOrDeadLetter(p, r, err)
	}
}

// loadMessage reads back from the store the payload and meta the
// scheduler left there (add), and reports whether the attempt can go on.
// An entry the store no longer has was settled, delivered or
// dead-lettered, by an attempt whose end a panic hid (guardAttempt), so
// there is nothing left to do. Any other failure keeps the work, in
// memory as the store does, and tries again after the longest retry delay.
func (q *scheduler) loadMessage(p *store.Pending) bool {
	s := q.s
	if p.ID == "" {
		// Never stored: the scheduler kept it whole.
		return true
	}
	err := s.store.LoadMessage(p)
	switch {
	case err == nil:
		return true
	case errors.Is(err, store.ErrNotFound):
		// Normal, not a warning: on a cluster another node takes held
		// work over (a returning owner's TakeHeld, a takeover), and the
		// cluster test logged this for every such message.
		s.log.Debug("pending work is no longer in the store; it was settled", "id", p.ID, "message_id", p.Message.ID)
		return false
	}
	s.log.Error("could not read pending work from the store; trying again later", "id", p.ID, "message_id", p.Message.ID, "err", err)
	p.NextAt = time.Now().Add(s.opts.RetryDelayCap)
	s.sched.add(p)
	return false
}

// retryOrDeadLetter records a failed attempt and schedules the next one,
// or dead-letters the message when attempts are used up.
func (q *scheduler) retryOrDeadLetter(p *store.Pending, r protocol.ProcessMessageResult, err error) {
	s := q.s
	p.Attempts = append(p.Attempts, store.Attempt{At: time.Now(), Error: attemptError(r, err)})
	if len(p.Attempts) >= s.opts.MaxAttempts {
		reason := protocol.ReasonMaxRetries
		var derr *deliveryError
		if errors.As(err, &derr) && derr.Kind == protocol.ReasonSubscriberGone {
			reason = protocol.ReasonSubscriberGone
		}
		q.deadLetter(p, reason)
		return
	}
	p.NextAt = time.Now().Add(q.backoff(len(p.Attempts), r.RetrySeconds))
	// Scheduled even when the write fails: the store still holds the
	// previous attempt's record, which a restart would resume.
	q.storeOp("reschedule retry", func() error { return s.store.PutPending(p) })
	s.observers.emitPending(p)
	s.sched.add(p)
}

// findSubscriber returns clientID's subscriber and the pattern to deliver
// under: the same pattern when the client still holds it, else its newest
// pattern that matches topic; or nil.
func (q *scheduler) findSubscriber(clientID, pattern, topic string) (subscriber, string) {
	s := q.s
	if f := s.funcSubscriber(clientID); f != nil {
		if p := f.patternFor(pattern, topic); p != "" {
			return f, p
		}
		return nil, ""
	}
	s.mu.Lock()
	c := s.clients[clientID]
	s.mu.Unlock()
	if c != nil {
		if p := c.patternFor(pattern, topic); p != "" {
			return c, p
		}
		return nil, ""
	}
	// Connected to another node of the cluster, perhaps.
	for _, in := range s.cl.remoteStandIns(clientID) {
		if p := in.patternFor(pattern, topic); p != "" {
			return in, p
		}
	}
	// Away, with a durable subscription that takes it, perhaps.
	if a := s.durables.absentee(clientID); a != nil {
		if p := a.patternFor(pattern, topic); p != "" {
			return a, p
		}
	}
	return nil, ""
}

// forget deletes settled work from the store; work the store never took
// (p.ID empty) has nothing there.
func (q *scheduler) forget(p *store.Pending, what string) {
	s := q.s
	if p.ID != "" {
		q.storeOp(what, func() error { return s.store.DeletePending(p.ID) })
	}
}

// storeOp runs a store write and logs its failure; the caller keeps the
// work in memory so that a refused write does not lose the message.
func (q *scheduler) storeOp(what string, op func() error) {
	s := q.s
	if err := op(); err != nil {
		s.log.Error("store write failed", "op", what, "err", err)
	}
}
