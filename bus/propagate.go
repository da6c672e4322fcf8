package bus

import (
	"context"
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
	// A replayed message keeps its id, so subscribers can tell it again.
	if m.ID == "" {
		m.ID = s.bootID + "-" + strconv.FormatUint(s.messageSeq.Add(1), 10)
		m.PublishedAt = time.Now()
	}
	result := &protocol.SendMessageResult{MessageID: m.ID, Acks: []protocol.Ack{}}
	chain := s.router.route(m.Topic)
	if len(chain) == 0 {
		result.Reason = protocol.ReasonNoSubscribers
		if reliable && s.holds(m.Topic) {
			if err := s.hold(m, result); err != nil {
				return nil, err
			}
			s.metrics.published.WithLabelValues("held").Inc()
			return result, nil
		}
		s.metrics.published.WithLabelValues(protocol.ReasonNoSubscribers).Inc()
		return result, nil
	}
	s.metrics.published.WithLabelValues("routed").Inc()
	s.pass(m, chain, result, reliable, nil)
	return result, nil
}

// pass delivers m down chain, one subscriber at a time, until a policy
// says stop. A failed delivery does not stop the walk; it is recorded in
// its ack. When no subscriber handled the message (no policy stopped the
// walk) and reliable is set, every subscriber that asked for a retry or
// whose delivery failed gets one, scheduled and stored; the publisher does
// not wait for it. A handled message's retries are dropped.
//
// A fallback subscriber asking for a retry asks for the message to be
// routed again instead: it is held (prior holds the routing attempts made
// so far) and routed when another client subscribes or its retry_seconds
// pass (see rehold).
func (s *Server) pass(m *store.Message, chain []*subscription, result *protocol.SendMessageResult, reliable bool, prior []store.Attempt) {
	result.Success = true
	type retry struct {
		ack     int
		attempt store.Attempt
		delay   time.Duration
	}
	var retries []retry
	var reroute *retry
	handled := false
	for _, sub := range chain {
		d := &delivery{Message: m, ClientID: sub.conn.clientID, Subscription: sub.pattern.String(), Attempt: 1, conn: sub.conn}
		at := time.Now()
		r, err := s.deliver(s.ctx, d)
		ack := protocol.Ack{ClientID: d.ClientID, Subscription: d.Subscription}
		if err != nil {
			ack.Error = err.Error()
		} else {
			ack.Processed, ack.Message, ack.StopPropagation = r.Handled(), r.Message, r.StopPropagation
		}
		switch {
		case sub.fallback && err == nil && r.ShouldRetry && !r.Handled():
			if reroute == nil {
				delay := s.askedDelay(r.RetrySeconds)
				reroute = &retry{len(result.Acks), store.Attempt{At: at, Error: attemptError(r, err)}, delay}
			}
		case needsRetry(r, err):
			retries = append(retries, retry{len(result.Acks), store.Attempt{At: at, Error: attemptError(r, err)}, s.backoff(1, r.RetrySeconds)})
		}
		result.Acks = append(result.Acks, ack)
		if err == nil && sub.policy.Stops(ack.Processed, ack.StopPropagation) {
			handled = true
			break
		}
	}
	if handled || !reliable {
		return
	}
	if reroute != nil {
		s.rehold(m, &result.Acks[reroute.ack], append(prior, reroute.attempt), reroute.delay)
	}
	for _, rt := range retries {
		ack := &result.Acks[rt.ack]
		if s.opts.MaxAttempts <= 1 {
			s.deadLetter(&store.Pending{Kind: store.KindRetry, Message: *m, ClientID: ack.ClientID, Subscription: ack.Subscription, Attempts: []store.Attempt{rt.attempt}}, protocol.ReasonMaxRetries)
			continue
		}
		p := &store.Pending{
			Kind:         store.KindRetry,
			Message:      *m,
			ClientID:     ack.ClientID,
			Subscription: ack.Subscription,
			Attempts:     []store.Attempt{rt.attempt},
			NextAt:       time.Now().Add(rt.delay),
		}
		if err := s.store.PutPending(p); err != nil {
			s.log.Error("could not store a retry", "message_id", m.ID, "client", ack.ClientID, "err", err)
			ack.Error = joinErrors(ack.Error, "retry not scheduled: "+err.Error())
			continue
		}
		ack.Retrying, ack.Attempt, ack.NextAttempt = true, 2, p.NextAt.UTC().Format(time.RFC3339Nano)
		// From here on p belongs to the scheduler.
		s.sched.add(p)
		s.metrics.retriesScheduled.Inc()
	}
}

func joinErrors(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}
