package bus

import (
	"fmt"
	"time"

	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/protocol"
)

// A held message waits for a subscriber on the time scale agents live on,
// not on the retry schedule: it is routed again when a subscriber that
// could take it appears (wakeHolds), when a fallback's retry_seconds have
// passed, and once more when its lifetime ends, and only then is it
// dead-lettered. Routings that found nobody, or only a fallback asking to
// wait, do not use up MaxAttempts; that budget is for subscribers that
// answered and failed.

// isHeld reports whether a message to topic that nobody subscribes to is
// held for a subscriber to appear, rather than refused.
func (q *scheduler) isHeld(topic string) bool {
	s := q.s
	for _, p := range s.holdPatterns {
		if p.Match(topic) {
			return true
		}
	}
	return false
}

// holdEnds is when a hold with these routing attempts ends: HoldLifetime
// after the first, which is the publish (or the replay). The store keeps
// the attempts, so a restart neither renews nor shortens the lifetime.
func (q *scheduler) holdEnds(attempts []store.Attempt) time.Time {
	s := q.s
	if len(attempts) == 0 {
		return time.Now().Add(s.opts.HoldLifetime)
	}
	return attempts[0].At.Add(s.opts.HoldLifetime)
}

// hold stores m until a subscriber appears or its lifetime ends, and says
// so in result. It commits before returning, so the publisher never hears
// of a hold the store does not have.
func (q *scheduler) hold(m *store.Message, result *protocol.SendMessageResult) error {
	s := q.s
	now := time.Now()
	p := &store.Pending{
		Kind:     store.KindHold,
		Message:  *m,
		Attempts: []store.Attempt{{At: now, Error: "no subscribers"}},
		NextAt:   now.Add(s.opts.HoldLifetime),
	}
	if err := s.store.PutPending(p); err != nil {
		return protocol.Errorf(protocol.ErrInternal, "hold message for %q: %v", m.Topic, err)
	}
	result.Held = true
	// Unless a subscriber appears first, the next routing is the last
	// one, when the lifetime ends.
	result.NextAttempt = p.NextAt.UTC().Format(time.RFC3339Nano)
	s.metrics.held.Inc()
	s.observers.emitPending(p)
	q.queueHold(p)
	return nil
}

// queueHold hands a stored hold to the scheduler; from here on p belongs
// to it. A subscriber that appeared between the routing that found nobody
// (or only fallbacks, one of which asked to wait) and now woke no hold,
// since this one was not queued yet: route again, and make this hold due
// at once if that finds a subscriber that could take it (hasTaker).
func (q *scheduler) queueHold(p *store.Pending) {
	s := q.s
	topic, askedBy := p.Message.Topic, p.AskedBy
	e := s.sched.add(p)
	if q.hasTaker(topic, askedBy) {
		s.sched.wakeHold(e)
	}
}

// hasTaker reports whether a message on topic would now reach a
// subscriber that could take it. For a hold nobody asked for (askedBy
// empty) that is anyone. For one that askedBy, a fallback, asked to wait,
// it is a regular subscriber: the fallbacks routing finds now were most
// likely asked in the same pass, and counting them would undo the wait
// (two fallbacks would wake each other's holds for ever).
func (q *scheduler) hasTaker(topic, askedBy string) bool {
	s := q.s
	for _, sub := range s.router.route(topic) {
		if askedBy == "" || !sub.fallback {
			return true
		}
	}
	return false
}

// attemptHold routes a held message again: to its subscribers if any have
// appeared, with the same per-subscriber retry rules as a fresh publish;
// else it waits on until its lifetime ends, and is then dead-lettered.
func (q *scheduler) attemptHold(p *store.Pending) {
	s := q.s
	chain := s.router.route(p.Message.Topic)
	now := time.Now()
	ends := q.holdEnds(p.Attempts)
	if !now.Before(ends) && !hasRegular(chain) {
		// The fallbacks have had their say during the lifetime; asking
		// them again now would only bring forward what they asked to wait.
		s.metrics.held.Dec()
		p.Attempts = append(p.Attempts, store.Attempt{At: now,
			Error: fmt.Sprintf("hold lifetime of %s ended with no subscriber for %q", s.opts.HoldLifetime, p.Message.Topic)})
		q.deadLetter(p, protocol.ReasonNoSubscribers)
		return
	}
	if len(chain) == 0 {
		// Woken by a subscriber that has gone again: wait on.
		p.NextAt = ends
		q.storeOp("reschedule hold", func() error { return s.store.PutPending(p) })
		q.queueHold(p)
		return
	}
	s.metrics.held.Dec()
	s.observers.emitRouted(protocol.JournalWoken, &p.Message, chain, "")
	result := &protocol.SendMessageResult{MessageID: p.Message.ID, Acks: []protocol.Ack{}}
	s.pass(&p.Message, chain, result, true, p.Attempts)
	// The retries the pass scheduled are stored; only now may the hold go.
	q.forget(p, "release hold")
}

// resume schedules pending work read back from the store: on start, or
// taken over from a dead node of a cluster. A hold whose subscriber has
// appeared already (on another node, while this one started or took
// over) is due at once, since no subscribe will wake it now.
func (q *scheduler) resume(p *store.Pending) {
	s := q.s
	if p.Kind != store.KindHold {
		s.sched.add(p)
		return
	}
	s.metrics.held.Inc()
	q.resumeHold(p)
	q.queueHold(p)
}

// resumeHold prepares a hold read back from the store on start: it falls
// due no later than the end of its lifetime as this bus counts it, so that
// a HoldLifetime shortened since it was stored applies to it too (a
// lengthened one does through attemptHold, which waits on).
func (q *scheduler) resumeHold(p *store.Pending) {
	if ends := q.holdEnds(p.Attempts); p.NextAt.After(ends) {
		p.NextAt = ends
	}
}

// hasRegular reports whether chain has a subscriber that is not a
// fallback.
func hasRegular(chain []*subscription) bool {
	for _, sub := range chain {
		if !sub.fallback {
			return true
		}
	}
	return false
}

// rehold holds m again after the fallback subscriber of ack asked for it
// to be routed again (say, once the agent it spawned has subscribed), and
// records that in the ack; askedBy is that fallback's clientId, or "" for
// a message whose only subscriber left before it could be written
// (settle), which any subscriber may then take at once. attempts are the routing attempts made so far,
// the first being the publish. The hold is due after delay, the
// fallback's retry_seconds, or sooner when another subscriber appears;
// a delay of 0 means at once if a regular subscriber already has (the
// agent the fallback started), else the retry backoff,
// so that a fallback answering 0 cannot spin the bus. Either way it is
// due no later than the end of its lifetime, when it is dead-lettered.
func (q *scheduler) rehold(m *store.Message, ack *protocol.Ack, askedBy string, attempts []store.Attempt, delay time.Duration) {
	s := q.s
	now := time.Now()
	ends := q.holdEnds(attempts)
	p := &store.Pending{Kind: store.KindHold, Message: *m, Attempts: attempts, AskedBy: askedBy}
	if !now.Before(ends) {
		q.deadLetter(p, protocol.ReasonNoSubscribers)
		return
	}
	if delay <= 0 && !q.hasTaker(m.Topic, askedBy) {
		delay = q.backoff(len(attempts), 0)
	}
	p.NextAt = now.Add(delay)
	if p.NextAt.After(ends) {
		p.NextAt = ends
	}
	if err := s.store.PutPending(p); err != nil {
		// Kept in memory rather than dropped, as a retry is (walk).
		s.log.Error("could not store a message held for rerouting; keeping it in memory", "message_id", m.ID, "err", err)
		ack.Error = joinErrors(ack.Error, "reroute kept in memory only, not stored: "+err.Error())
	}
	ack.Retrying, ack.Attempt, ack.NextAttempt = true, len(attempts)+1, p.NextAt.UTC().Format(time.RFC3339Nano)
	s.metrics.held.Inc()
	s.observers.emitPending(p)
	q.queueHold(p)
}
