package bus

import (
	"time"

	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/protocol"
)

// deadLetter moves pending work to the dead-letter queue in one store
// transaction, tells operators on TopicDeadLettered and returns the dead
// letter's id. If the queue is at a cap (deadLetterRoom) or the store
// refuses, it returns "" and the work stays pending and is tried again
// later: a message is delivered or dead-lettered, never dropped.
func (q *scheduler) deadLetter(p *store.Pending, reason string) string {
	s := q.s
	if full := s.limitState.deadLetterRoom(); full != "" {
		q.keepPending(p, "dead-letter queue at "+full)
		return ""
	}
	d := &store.DeadLetter{
		Message:      p.Message,
		ClientID:     p.ClientID,
		Subscription: p.Subscription,
		Subscriber:   p.Subscriber,
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
		q.keepPending(p, "dead-letter failed")
		return ""
	}
	s.metrics.deadLettered.WithLabelValues(reason).Inc()
	s.observers.emitDeadLetter(protocol.JournalDeadLettered, d, id, reason)
	s.log.Warn("message dead-lettered", "id", id, "message_id", p.Message.ID, "topic", p.Message.Topic,
		"client", p.ClientID, "reason", reason, "attempts", len(p.Attempts))
	s.events.emit(TopicDeadLettered, map[string]any{
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
	return id
}

// keepPending keeps work that could not be dead-lettered pending, due
// again after the longest retry delay. Work the store never took is
// stored now, so that it survives a restart and counts against the caps
// like any other; if that fails too, memory keeps it.
func (q *scheduler) keepPending(p *store.Pending, why string) {
	s := q.s
	p.NextAt = time.Now().Add(s.opts.RetryDelayCap)
	if p.ID == "" {
		s.sched.storeOp("keep pending: "+why, func() error { return s.store.PutPending(p) })
	}
	if p.Kind == store.KindHold {
		// Its routing took it off the held count; it is held again.
		s.metrics.held.Inc()
	}
	s.sched.add(p)
}
