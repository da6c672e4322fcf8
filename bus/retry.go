package bus

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/protocol"
)

// backoff returns the delay before the next attempt, after attempts
// attempts: the subscriber's retry_seconds when it gave one, else
// exponential from RetryBaseDelay with jitter; both capped by
// RetryDelayCap.
func (s *Server) backoff(attempts int, retrySeconds float64) time.Duration {
	limit := s.opts.RetryDelayCap
	if retrySeconds > 0 {
		return s.askedDelay(retrySeconds)
	}
	d := s.opts.RetryBaseDelay
	for i := 1; i < attempts && d < limit; i++ {
		d *= 2
	}
	d = min(d, limit)
	// Equal jitter: half fixed, half random, so retries of many messages
	// that failed together spread out.
	return d/2 + rand.N(d/2+1)
}

// askedDelay is the delay a subscriber asked for in retry_seconds, capped
// by RetryDelayCap. The cap is applied before converting, so a huge value
// cannot overflow into a negative, uncapped delay.
func (s *Server) askedDelay(retrySeconds float64) time.Duration {
	switch {
	case !(retrySeconds > 0):
		return 0
	case retrySeconds >= s.opts.RetryDelayCap.Seconds():
		return s.opts.RetryDelayCap
	}
	return time.Duration(retrySeconds * float64(time.Second))
}

// needsRetry reports whether an attempt's outcome asks for another one.
func needsRetry(r protocol.ProcessMessageResult, err error) bool {
	return err != nil || (r.ShouldRetry && !r.Handled())
}

// attemptError is what an attempt records: the failure, or the
// subscriber's own word when it asked for a retry.
func attemptError(r protocol.ProcessMessageResult, err error) string {
	if err != nil {
		return err.Error()
	}
	if r.Message != "" {
		return "should_retry: " + r.Message
	}
	return "should_retry"
}

// scheduler runs pending work (retries and holds) when it is due. The
// store is the truth; the scheduler's heap mirrors what the store holds
// pending and is rebuilt from it on start.
type scheduler struct {
	s    *Server
	wake chan struct{}
	// running bounds concurrent attempts.
	running chan struct{}
	// inflight counts running attempts, so Shutdown can wait for them.
	inflight sync.WaitGroup

	// mu guards queue and stopped.
	mu      sync.Mutex
	queue   pendingHeap
	stopped bool
}

func newScheduler(s *Server) *scheduler {
	return &scheduler{s: s, wake: make(chan struct{}, 1), running: make(chan struct{}, 64)}
}

// add queues p for its NextAt.
func (q *scheduler) add(p *store.Pending) {
	q.mu.Lock()
	heap.Push(&q.queue, p)
	q.mu.Unlock()
	q.poke()
}

func (q *scheduler) poke() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// wakeHolds makes every held message whose topic matches due now: client
// has just subscribed with a pattern that match reports on. A hold that
// client asked to wait is left alone: its own subscribing again (a
// reconnect, say) is no reason to ask it sooner than it said.
func (q *scheduler) wakeHolds(match func(topic string) bool, client string) {
	now := time.Now()
	woke := false
	q.mu.Lock()
	for _, p := range q.queue {
		if p.Kind == store.KindHold && p.NextAt.After(now) && p.AskedBy != client && match(p.Message.Topic) {
			p.NextAt = now
			woke = true
		}
	}
	if woke {
		heap.Init(&q.queue)
	}
	q.mu.Unlock()
	if woke {
		q.poke()
	}
}

// wakeHold makes the hold p due now, if it is still queued.
func (q *scheduler) wakeHold(p *store.Pending) {
	now := time.Now()
	woke := false
	q.mu.Lock()
	for i, queued := range q.queue {
		if queued == p {
			if p.NextAt.After(now) {
				p.NextAt = now
				heap.Fix(&q.queue, i)
				woke = true
			}
			break
		}
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
		var due *store.Pending
		wait := time.Hour
		if q.stopped {
			q.mu.Unlock()
			return
		}
		if len(q.queue) > 0 {
			if d := time.Until(q.queue[0].NextAt); d <= 0 {
				due = heap.Pop(&q.queue).(*store.Pending)
			} else {
				wait = d
			}
		}
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

// pendingHeap orders pending work by NextAt.
type pendingHeap []*store.Pending

func (h pendingHeap) Len() int           { return len(h) }
func (h pendingHeap) Less(i, j int) bool { return h[i].NextAt.Before(h[j].NextAt) }
func (h pendingHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *pendingHeap) Push(x any)        { *h = append(*h, x.(*store.Pending)) }
func (h *pendingHeap) Pop() any {
	old := *h
	p := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return p
}

// attempt runs one due retry or hold and settles its outcome in the store.
func (s *Server) attempt(p *store.Pending) {
	if p.Kind == store.KindHold {
		s.attemptHold(p)
		return
	}
	number := len(p.Attempts) + 1
	c, pattern := s.findSubscriber(p.ClientID, p.Subscription, p.Message.Topic)
	if c == nil {
		s.metrics.retryAttempts.WithLabelValues(protocol.ReasonSubscriberGone).Inc()
		s.retryOrDeadLetter(p, protocol.ProcessMessageResult{}, &deliveryError{Kind: protocol.ReasonSubscriberGone,
			Detail: fmt.Sprintf("client %q is not connected or no longer subscribes to a pattern matching %q", p.ClientID, p.Message.Topic)})
		return
	}
	d := &delivery{Message: &p.Message, ClientID: p.ClientID, Subscription: pattern, Attempt: number, conn: c}
	r, err := s.deliver(s.ctx, d)
	if err != nil && s.draining.Load() {
		// Perhaps cut off by the shutdown itself: not counted. The store
		// keeps the record as it was, and the next start tries again.
		return
	}
	switch {
	case !needsRetry(r, err) && r.Handled():
		s.metrics.retryAttempts.WithLabelValues("processed").Inc()
		s.storeOp("drop delivered retry", func() error { return s.store.DeletePending(p.ID) })
	case !needsRetry(r, err):
		// The subscriber asked for this retry and has now declined the
		// message for good; the publisher is long gone, so it is kept.
		s.metrics.retryAttempts.WithLabelValues(protocol.ReasonRejected).Inc()
		p.Attempts = append(p.Attempts, store.Attempt{At: time.Now(), Error: "rejected: " + r.Message})
		s.deadLetter(p, protocol.ReasonRejected)
	default:
		s.metrics.retryAttempts.WithLabelValues("retry").Inc()
		s.retryOrDeadLetter(p, r, err)
	}
}

// retryOrDeadLetter records a failed attempt and schedules the next one,
// or dead-letters the message when attempts are used up.
func (s *Server) retryOrDeadLetter(p *store.Pending, r protocol.ProcessMessageResult, err error) {
	p.Attempts = append(p.Attempts, store.Attempt{At: time.Now(), Error: attemptError(r, err)})
	if len(p.Attempts) >= s.opts.MaxAttempts {
		reason := protocol.ReasonMaxRetries
		var derr *deliveryError
		if errors.As(err, &derr) && derr.Kind == protocol.ReasonSubscriberGone {
			reason = protocol.ReasonSubscriberGone
		}
		s.deadLetter(p, reason)
		return
	}
	p.NextAt = time.Now().Add(s.backoff(len(p.Attempts), r.RetrySeconds))
	// Scheduled even when the write fails: the store still holds the
	// previous attempt's record, which a restart would resume.
	s.storeOp("reschedule retry", func() error { return s.store.PutPending(p) })
	s.sched.add(p)
}

// findSubscriber returns clientID's connection and the pattern to deliver
// under: the same pattern when the client still holds it, else its newest
// pattern that matches topic.
func (s *Server) findSubscriber(clientID, pattern, topic string) (*conn, string) {
	s.mu.Lock()
	c := s.clients[clientID]
	s.mu.Unlock()
	if c == nil {
		return nil, ""
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.subs[pattern]; ok {
		return c, pattern
	}
	var best *subscription
	for _, sub := range c.subs {
		if sub.pattern.Match(topic) && (best == nil || sub.seq > best.seq) {
			best = sub
		}
	}
	if best == nil {
		return nil, ""
	}
	return c, best.pattern.String()
}

// storeOp runs a store write and logs its failure; the caller keeps the
// work in memory so that a refused write does not lose the message.
func (s *Server) storeOp(what string, op func() error) {
	if err := op(); err != nil {
		s.log.Error("store write failed", "op", what, "err", err)
	}
}
