package bus

import (
	"time"

	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/protocol"
)

// holds reports whether a message to topic that nobody subscribes to is
// held for a subscriber to appear, rather than refused.
func (s *Server) holds(topic string) bool {
	for _, p := range s.holdPatterns {
		if p.Match(topic) {
			return true
		}
	}
	return false
}

// hold stores m for another routing attempt and says so in result. It
// commits before returning, so the publisher never hears of a hold the
// store does not have.
func (s *Server) hold(m *store.Message, result *protocol.SendMessageResult) error {
	p := &store.Pending{
		Kind:     store.KindHold,
		Message:  *m,
		Attempts: []store.Attempt{{At: time.Now(), Error: "no subscribers"}},
		NextAt:   time.Now().Add(s.backoff(1, 0)),
	}
	if err := s.store.PutPending(p); err != nil {
		return protocol.Errorf(protocol.ErrInternal, "hold message for %q: %v", m.Topic, err)
	}
	result.Held = true
	result.NextAttempt = p.NextAt.UTC().Format(time.RFC3339Nano)
	s.metrics.held.Inc()
	s.queueHold(p)
	return nil
}

// queueHold hands a stored hold to the scheduler; from here on p belongs
// to it. A subscriber that appeared between the routing that found nobody
// and now woke no hold, since this one was not queued yet: route again,
// and make the hold due at once if that finds someone.
func (s *Server) queueHold(p *store.Pending) {
	topic := p.Message.Topic
	s.sched.add(p)
	if len(s.router.route(topic)) > 0 {
		s.sched.wakeHolds(func(t string) bool { return t == topic })
	}
}

// attemptHold routes a held message again: to its subscribers if any have
// appeared, with the same per-subscriber retry rules as a fresh publish;
// else it waits again, or is dead-lettered when attempts are used up.
func (s *Server) attemptHold(p *store.Pending) {
	chain := s.router.route(p.Message.Topic)
	if len(chain) == 0 {
		p.Attempts = append(p.Attempts, store.Attempt{At: time.Now(), Error: "no subscribers"})
		if len(p.Attempts) >= s.opts.MaxAttempts {
			s.metrics.held.Dec()
			s.deadLetter(p, protocol.ReasonNoSubscribers)
			return
		}
		p.NextAt = time.Now().Add(s.backoff(len(p.Attempts), 0))
		s.storeOp("reschedule hold", func() error { return s.store.PutPending(p) })
		s.queueHold(p)
		return
	}
	s.metrics.held.Dec()
	result := &protocol.SendMessageResult{MessageID: p.Message.ID, Acks: []protocol.Ack{}}
	s.pass(&p.Message, chain, result, true, p.Attempts)
	// The retries the pass scheduled are stored; only now may the hold go.
	s.storeOp("release hold", func() error { return s.store.DeletePending(p.ID) })
}

// rehold holds m again after a fallback subscriber asked for it to be
// routed again (say, once the agent it spawned has subscribed), and
// records that in the fallback's ack. attempts are the routing attempts
// made so far; when they are used up the message is dead-lettered.
func (s *Server) rehold(m *store.Message, ack *protocol.Ack, attempts []store.Attempt, delay time.Duration) {
	p := &store.Pending{Kind: store.KindHold, Message: *m, Attempts: attempts, NextAt: time.Now().Add(delay)}
	if len(attempts) >= s.opts.MaxAttempts {
		s.deadLetter(p, protocol.ReasonNoSubscribers)
		return
	}
	if err := s.store.PutPending(p); err != nil {
		s.log.Error("could not hold a message for rerouting", "message_id", m.ID, "err", err)
		ack.Error = joinErrors(ack.Error, "reroute not scheduled: "+err.Error())
		return
	}
	ack.Retrying, ack.Attempt, ack.NextAttempt = true, len(attempts)+1, p.NextAt.UTC().Format(time.RFC3339Nano)
	s.metrics.held.Inc()
	s.queueHold(p)
}
