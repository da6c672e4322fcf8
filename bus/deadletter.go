package bus

import (
	"context"
	"encoding/json"
	"time"

	"github.com/bub-bus/bub/bus/store"
)

// TopicDeadLettered is the system topic the bus publishes to when it
// dead-letters a message.
const TopicDeadLettered = "system:message.dead_lettered"

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
	event, _ := json.Marshal(map[string]any{
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
	s.emit(TopicDeadLettered, event)
}

// emit publishes a bus event. Events are not retried, held or
// dead-lettered themselves (that could loop); they go to whoever
// subscribes now.
func (s *Server) emit(topic string, payload json.RawMessage) {
	if s.beginPublish() != nil {
		return
	}
	go func() {
		defer s.publishes.Done()
		s.publish(context.Background(), &store.Message{Topic: topic, From: s.opts.ServerID, Payload: payload}, false)
	}()
}
