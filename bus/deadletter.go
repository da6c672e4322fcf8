package bus

import (
	"time"

	"github.com/bub-bus/bub/bus/store"
)

// deadLetter moves pending work to the dead-letter queue in one store
// transaction and tells operators on TopicDeadLettered. If the store
// refuses, the work stays pending and is tried again later: a message is
// delivered or dead-lettered, never dropped.
func (s *Server) deadLetter(p *store.Pending, reason string) {
	d := &store.DeadLetter{
		Message:      p.Message,
		ClientID:     p.ClientID,
		Subscription: p.Subscription,
		Reason:       reason,
		Attempts:     p.Attempts,
		DeadAt:       time.Now(),
	}
	if n := len(p.Attempts); n > 0 {
		d.FirstAttempt, d.LastAttempt = p.Attempts[0].At, p.Attempts[n-1].At
	}
	id, err := s.store.DeadLetter(p.ID, d)
	if err != nil {
		s.log.Error("dead-letter failed; keeping the message pending", "message_id", p.Message.ID, "err", err)
		p.NextAt = time.Now().Add(s.opts.RetryDelayCap)
		s.sched.add(p)
		return
	}
	s.metrics.deadLettered.WithLabelValues(reason).Inc()
	s.log.Warn("message dead-lettered", "id", id, "message_id", p.Message.ID, "topic", p.Message.Topic,
		"client", p.ClientID, "reason", reason, "attempts", len(p.Attempts))
	s.emit(TopicDeadLettered, map[string]any{
		"type":         "dead_letter",
		"id":           id,
		"messageId":    p.Message.ID,
		"topic":        p.Message.Topic,
		"client_id":    p.ClientID,
		"subscription": p.Subscription,
		"reason":       reason,
		"attempts":     len(p.Attempts),
		"timestamp":    d.DeadAt.UTC().Format(time.RFC3339Nano),
	})
}
