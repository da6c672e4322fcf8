package bus

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/protocol"
)

// publish routes an accepted message and walks its chain. With reliable
// set, the message gets the full delivery guarantee: retries for the
// subscribers that need them, a hold when nobody subscribes to a held
// topic. Every retry and hold is committed to the store before publish
// returns, so the result never announces one the store lacks.
func (s *Server) publish(_ context.Context, m *store.Message, reliable bool) (*protocol.SendMessageResult, error) {
	return s.publishRouted(m, nil, s.router.route(m.Topic), nil, reliable)
}

// publishRouted is publish for a message already routed to chain, with
// its tickets (order.go) when it keeps its publisher's order, and the
// HTTP request's header when it came by one (PublishHook).
func (s *Server) publishRouted(m *store.Message, header http.Header, chain []*subscription, tickets []ticket, reliable bool) (*protocol.SendMessageResult, error) {
	s.name(m)
	if len(s.publishHooks) > 0 {
		defer hookPublish(s.publishHooks, m, header, len(chain))()
	}
	result, err := s.routed(m, chain, reliable)
	if err != nil || len(chain) == 0 {
		return result, err
	}
	s.walk(m, chain, tickets, result, reliable, nil)
	return result, nil
}

// routed begins the result of publishing m, named already, to chain, and
// counts its routing and tells the observers; it completes the result when chain is
// empty (the message is held, or nobody subscribes).
func (s *Server) routed(m *store.Message, chain []*subscription, reliable bool) (*protocol.SendMessageResult, error) {
	result := &protocol.SendMessageResult{MessageID: m.ID, Acks: []protocol.Ack{}}
	if len(chain) == 0 {
		result.Reason = protocol.ReasonNoSubscribers
		if reliable && s.sched.isHeld(m.Topic) {
			if err := s.sched.hold(m, result); err != nil {
				return nil, err
			}
			s.metrics.published.WithLabelValues("held").Inc()
			return result, nil
		}
		s.metrics.published.WithLabelValues(protocol.ReasonNoSubscribers).Inc()
		s.observers.emitRouted(protocol.JournalRouted, m, nil, protocol.ReasonNoSubscribers)
		return result, nil
	}
	s.metrics.published.WithLabelValues("routed").Inc()
	s.observers.emitRouted(protocol.JournalRouted, m, chain, "")
	return result, nil
}

// name gives m its id and publication time, unless it has an id: a
// replayed message keeps its id, so subscribers can tell it again.
func (s *Server) name(m *store.Message) {
	if m.ID == "" {
		m.ID = s.bootID + "-" + strconv.FormatUint(s.messageSeq.Add(1), 10)
		m.PublishedAt = time.Now()
	}
}

// pass delivers m down chain until a policy says stop; see walk. It keeps
// no publisher's order: a hold routed again is as a retry.
func (s *Server) pass(m *store.Message, chain []*subscription, result *protocol.SendMessageResult, reliable bool, prior []store.Attempt) {
	s.walk(m, chain, nil, result, reliable, prior)
}

// outcome is one delivery of a walk: the subscriber's answer or why there
// was none, and when it began.
type outcome struct {
	result protocol.ProcessMessageResult
	err    error
	at     time.Time
}

// walk delivers m down chain until a policy says stop. A failed delivery
// does not stop the walk; it is recorded in its ack. When no subscriber
// handled the message (no policy stopped the walk) and reliable is set,
// every subscriber that asked for a retry or whose delivery failed gets
// one, scheduled and stored; the publisher does not wait for it; and
// every subscriber that answered reject has the message dead-lettered,
// committed before walk returns. A handled message's retries and
// rejections are dropped: another subscriber took it.
//
// Only an answer under a policy that may stop is waited for before the
// next subscriber is invoked: a continueAll subscriber's delivery goes
// out and the walk goes on at once, so a run of continueAll subscribers,
// and the one after them, are invoked together (walk.go says how,
// without a goroutine per delivery). The acks are still in chain order,
// and the walk returns once every delivery it made has answered or
// failed.
//
// tickets, one per subscriber of chain, keep the publisher's order
// (order.go); nil keeps none. Every ticket is passed before walk returns.
//
// A fallback subscriber asking for a retry asks for the message to be
// routed again instead: it is held (prior holds the routing attempts made
// so far) and routed when another client subscribes or its retry_seconds
// pass (see rehold).
func (s *Server) walk(m *store.Message, chain []*subscription, tickets []ticket, result *protocol.SendMessageResult, reliable bool, prior []store.Attempt) {
	w := s.newWalk(m, chain, tickets, result, reliable, prior, nil)
	w.ended = make(chan struct{})
	w.advance(nil)
	<-w.ended
	s.settle(m, chain[:w.made], w.outcomes, result, reliable, prior)
	w.release()
}

// settle completes result from the outcomes of the deliveries made to
// chain, in its order, and schedules what they call for (see walk):
// retries, dead letters, holds, each committed to the store before it
// returns.
func (s *Server) settle(m *store.Message, chain []*subscription, outcomes []outcome, result *protocol.SendMessageResult, reliable bool, prior []store.Attempt) {
	result.Success = true
	type retry struct {
		ack     int
		attempt store.Attempt
		delay   time.Duration
		sub     subscriber
	}
	// retries need another attempt; rejects, whose delay is unused, are
	// dead-lettered at once.
	var retries, rejects []retry
	var reroute *retry
	var helds []retry
	// unsent is the first delivery never written, its subscriber's
	// connection closing (and so out of the router, conn.serve): no retry
	// is addressed to a client that has left, and when nothing else took
	// the message it is routed again as if that subscriber had gone first
	// (a spawner's agent exits as a message for it is routed, say, and the
	// spawner's fallback then starts it).
	var unsent *retry
	handled := false
	// One allocation for the acks, not a doubling per growth: a fan-out
	// can have thousands.
	result.Acks = slices.Grow(result.Acks, len(chain))
	for i, sub := range chain {
		o := &outcomes[i]
		r, err := o.result, o.err
		ack := protocol.Ack{ClientID: sub.to.held().clientID, Subscription: sub.pattern.String()}
		if err != nil {
			ack.Error = err.Error()
		} else {
			ack.Processed, ack.Message, ack.StopPropagation = r.Handled(), r.Message, r.StopPropagation
		}
		switch {
		case err == errHeld:
			helds = append(helds, retry{ack: len(result.Acks), sub: sub.to})
		case failKind(err) == failNotSent:
			if unsent == nil {
				unsent = &retry{len(result.Acks), store.Attempt{At: o.at, Error: attemptError(r, err)}, 0, sub.to}
			}
		case err == nil && r.Rejected():
			rejects = append(rejects, retry{len(result.Acks), store.Attempt{At: o.at, Error: attemptError(r, err)}, 0, sub.to})
		case sub.fallback && err == nil && r.ShouldRetry && !r.Handled():
			if reroute == nil {
				delay := s.sched.askedDelay(r.RetrySeconds)
				reroute = &retry{len(result.Acks), store.Attempt{At: o.at, Error: attemptError(r, err)}, delay, sub.to}
			}
		case needsRetry(r, err):
			retries = append(retries, retry{len(result.Acks), store.Attempt{At: o.at, Error: attemptError(r, err)}, s.sched.backoff(1, r.RetrySeconds), sub.to})
		}
		result.Acks = append(result.Acks, ack)
		// A rejection's own stopPropagation ends the walk but is no
		// subscriber handling the message: it is dead-lettered still.
		if !r.Rejected() && o.stops(sub.policy) {
			handled = true
		}
	}
	if reliable {
		// Held for its owner whatever the others did: the owner was
		// reached, and answers when it is back (durable_sub.go).
		for _, h := range helds {
			s.durables.holdForOwner(m, h.sub.(*absent), &result.Acks[h.ack])
		}
	}
	if handled || !reliable {
		return
	}
	switch {
	case reroute != nil:
		s.sched.rehold(m, &result.Acks[reroute.ack], result.Acks[reroute.ack].ClientID, append(prior, reroute.attempt), reroute.delay)
	case unsent != nil && len(retries) == 0 && len(rejects) == 0 && len(helds) == 0:
		// At once the first time; after that with the retries' backoff,
		// so that a close that lingers is not a loop of store writes.
		var delay time.Duration
		if len(prior) > 0 {
			delay = s.sched.backoff(len(prior), 0)
		}
		s.sched.rehold(m, &result.Acks[unsent.ack], "", append(prior, unsent.attempt), delay)
	}
	for _, rj := range rejects {
		ack := &result.Acks[rj.ack]
		h := rj.sub.held()
		h.mu.Lock()
		subscriber := h.limitKeyLocked()
		h.mu.Unlock()
		p := &store.Pending{Kind: store.KindRetry, Message: *m, ClientID: ack.ClientID, Subscription: ack.Subscription,
			Subscriber: subscriber, Attempts: []store.Attempt{rj.attempt}}
		if ack.DeadLetter = s.sched.deadLetter(p, protocol.ReasonRejected); ack.DeadLetter == "" {
			ack.Error = joinErrors(ack.Error, notDeadLettered)
		}
	}
	for _, rt := range retries {
		ack := &result.Acks[rt.ack]
		// A retry counts against the subscriber it waits on; one whose
		// retries have reached its caps gets none, and the message is
		// dead-lettered for it at once.
		subscriber, refused := s.limitState.retryRoom(rt.sub)
		p := &store.Pending{
			Kind:         store.KindRetry,
			Message:      *m,
			ClientID:     ack.ClientID,
			Subscription: ack.Subscription,
			Subscriber:   subscriber,
			Attempts:     []store.Attempt{rt.attempt},
			NextAt:       time.Now().Add(rt.delay),
		}
		if refused != "" {
			p.Attempts[0].Error = joinErrors(p.Attempts[0].Error, refused)
			ack.Error = joinErrors(ack.Error, refused)
		}
		if s.opts.MaxAttempts <= 1 || refused != "" {
			if s.sched.deadLetter(p, protocol.ReasonMaxRetries) == "" {
				ack.Error = joinErrors(ack.Error, notDeadLettered)
			}
			continue
		}
		if err := s.store.PutPending(p); err != nil {
			// Kept in memory rather than dropped: the retry is still
			// made unless this process ends first, and its next attempt
			// stores it (retryOrDeadLetter), the store willing. The ack
			// says it is not stored, so the publisher can judge.
			s.log.Error("could not store a retry; keeping it in memory", "message_id", m.ID, "client", ack.ClientID, "err", err)
			ack.Error = joinErrors(ack.Error, "retry kept in memory only, not stored: "+err.Error())
		}
		ack.Retrying, ack.Attempt, ack.NextAttempt = true, 2, p.NextAt.UTC().Format(time.RFC3339Nano)
		s.observers.emitPending(p)
		// From here on p belongs to the scheduler.
		s.sched.add(p)
		s.metrics.retriesScheduled.Inc()
	}
}

// stops reports whether o stops the walk under policy. A message held
// for an away durable subscriber counts as processed, without
// stopPropagation: the owner takes it when it is back (docs/PROTOCOL.md,
// "Durable subscriptions").
func (o *outcome) stops(policy protocol.Policy) bool {
	if o.err == errHeld {
		return policy.Stops(true, false)
	}
	return o.err == nil && policy.Stops(o.result.Handled(), o.result.StopPropagation)
}

// deliverInTurn makes one delivery of a walk into o: it waits for the
// delivery's turn (order.go), not counted against the subscriber's
// delivery timeout, and gives the turn on once the delivery is written or
// failed. A panic is the delivery's failure, not the bus's end: it may
// run on a goroutine of its own.
func (s *Server) deliverInTurn(d *delivery, o *outcome) {
	defer func() {
		if d.turn != nil {
			d.turn.pass()
		}
		if p := recover(); p != nil {
			o.result, o.err = protocol.ProcessMessageResult{}, s.deliveryPanicked(d, p)
		}
	}()
	if d.turn != nil {
		d.turn.wait()
	}
	o.at = time.Now()
	o.result, o.err = s.pipe.deliver(s.ctx, d)
}

// notDeadLettered is added to the ack of a delivery the bus gave up on
// whose dead letter the queue or the store refused: it stays pending.
const notDeadLettered = "not dead-lettered yet; the bus tries again later"

func joinErrors(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}
