package spawner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/bub-bus/bub/peer"
)

// Why an agent was hibernated or woken: the "reason" of the
// system:agent.hibernated and system:agent.woken events. More wake
// reasons may come; readers should accept any.
const (
	// ReasonIdle: the agent had no delivery for Options.IdleTimeout.
	ReasonIdle = "idle"
	// ReasonCapacity: a conversation with no agent needed its place, and
	// it was the least recently used agent holding no message.
	ReasonCapacity = "capacity"
	// ReasonMessage: a message came for its conversation, or for
	// agent:{id}.
	ReasonMessage = "message"
	// ReasonRetry: the bus delivered it a message as it stopped, and
	// retries that message to its id.
	ReasonRetry = "retry"
	// ReasonToolEvent: the message was a subscription_event, an event
	// of a tool subscription the agent started (docs/PROTOCOL.md, "Tool
	// subscriptions").
	ReasonToolEvent = "tool event"
)

// Wake starts the agent that serves topic (a topic the spawner serves, or
// agent:{id} of an agent it started) unless it runs, and returns once the
// agent subscribes to a pattern matching topic. At capacity it makes room
// as a message would: it hibernates the least recently used agent that
// holds no message, or waits until one does. reason goes into the
// system:agent.woken event (ReasonMessage, or a reason of the caller's).
// It is how something other than a message to the spawner brings a
// hibernated agent back.
func (s *Spawner) Wake(ctx context.Context, topic, reason string) error {
	if _, refusal := s.await(ctx, topic, reason, false); refusal != nil {
		return errors.New(refusal.Message)
	}
	return nil
}

// await returns topic's agent once it subscribes to a pattern matching
// topic, starting it if needed; it outlives a hibernation that ends the
// agent meanwhile by waking it again. When no agent can be had, it
// returns instead the answer for the bus: should_retry, and when. At
// capacity, queue puts the conversation in the queue for a place instead
// of waiting for one (see acquire).
func (s *Spawner) await(ctx context.Context, topic, reason string, queue bool) (*agent, *peer.Result) {
	for {
		a, err := s.acquire(ctx, topic, reason, queue)
		if err != nil {
			r := s.refusal(topic, err)
			return nil, &r
		}
		// A starting agent is bounded by its watchdog, and its exit
		// tells the backoff to ask for; a running one that lacks the
		// subscription gets SpawnTimeout to (re)make it, say after a
		// reconnect.
		limit := time.NewTimer(s.opts.SpawnTimeout)
		again, r := s.awaitSubscription(ctx, a, topic, limit)
		limit.Stop()
		if !again {
			return a, r
		}
	}
}

// awaitSubscription waits until a subscribes to a pattern matching topic
// (r is nil), or it cannot (r is the answer for the bus), or a was
// hibernated first (again: wake it anew).
func (s *Spawner) awaitSubscription(ctx context.Context, a *agent, topic string, limit *time.Timer) (again bool, r *peer.Result) {
	for {
		s.mu.Lock()
		holds, ready, changed := a.holdsLocked(topic), a.ready, a.changed
		s.mu.Unlock()
		if holds {
			return false, nil
		}
		select {
		case <-changed:
		case <-a.exited:
			s.mu.Lock()
			failure, hibernated, wait := a.failure, a.hibernate != "", time.Until(a.slot.notBefore)
			s.mu.Unlock()
			if hibernated && failure == nil {
				return true, nil
			}
			if failure == nil {
				failure = errors.New("agent exited")
			}
			return false, &peer.Result{ShouldRetry: true, RetryAfter: max(wait, 0), Message: fmt.Sprintf("agent %s for %s: %v", a.id, a.slot.topic, failure)}
		case <-limit.C:
			if ready {
				return false, &peer.Result{ShouldRetry: true, RetryAfter: time.Second, Message: fmt.Sprintf("agent %s holds no subscription matching %s after %s", a.id, topic, s.opts.SpawnTimeout)}
			}
			limit.Reset(s.opts.SpawnTimeout)
		case <-ctx.Done():
			return false, &peer.Result{ShouldRetry: true, RetryAfter: time.Second, Message: fmt.Sprintf("gave up waiting for agent %s for %s: %v", a.id, a.slot.topic, context.Cause(ctx))}
		}
	}
}

// acquire returns the agent that serves topic, starting one when there is
// none. At capacity it asks idle agents to make room, and then, with
// queue, puts the conversation in the queue for a place (serveQueue starts
// its agent as soon as one frees) and returns ErrAtCapacity; without, it
// waits for a place until ctx ends.
//
// A delivery queues rather than waits: a handler waiting for a place
// holds what the places are freed by. Its Conn's handlers, so that the
// bus's events of agents subscribing were refused (issue 23's burst of
// 1,500 new conversations), and, for a message the bus routes again from
// its scheduler, one of the scheduler's 64 turns, which the reroutes that
// bring new agents their messages then queued behind. The bus holds the
// message of a queued conversation instead, and its agent's subscribe
// routes it again at once.
func (s *Spawner) acquire(ctx context.Context, topic, reason string, queue bool) (*agent, error) {
	waiting := false
	defer func() {
		if waiting {
			s.mu.Lock()
			s.waiting--
			s.mu.Unlock()
		}
	}()
	for {
		a, launch, created, err := s.claim(topic, reason)
		if created != nil {
			s.remember(created)
		}
		if err == nil {
			if launch {
				s.launch(a)
			}
			return a, nil
		}
		if !errors.Is(err, ErrAtCapacity) {
			return nil, err
		}
		s.mu.Lock()
		sl := s.slotOfLocked(topic)
		if sl != nil && sl.agent != nil {
			// Started since claim looked.
			s.mu.Unlock()
			continue
		}
		ahead := 0
		if queue {
			ahead = s.enqueueLocked(sl, reason)
		} else if !waiting {
			waiting = true
			s.waiting++
		}
		victims := s.makeRoomLocked()
		freed := s.freed
		s.mu.Unlock()
		for _, v := range victims {
			s.terminate(v)
		}
		if queue {
			return nil, fmt.Errorf("%w; queued for a place, %d ahead", err, ahead)
		}
		select {
		case <-freed:
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (waited for a place: %v)", err, context.Cause(ctx))
		}
	}
}

// enqueueLocked puts sl in the queue for a place, unless it is there
// already, and has serveQueue serve the queue; it returns how many
// conversations are ahead of sl.
func (s *Spawner) enqueueLocked(sl *slot, reason string) int {
	if sl.queued == "" {
		sl.queued = reason
		s.queue = append(s.queue, sl)
	}
	if !s.serving && !s.closing {
		s.serving = true
		s.wakes.Go(s.serveQueue)
	}
	return slices.Index(s.queue, sl)
}

// serveQueue starts the agents of the queued conversations, oldest first,
// each as soon as a place frees, making room as a waiting message would,
// until the queue is empty or the spawner closes. The agent's subscribe
// has the bus route the conversation's held message again, to it.
func (s *Spawner) serveQueue() {
	for {
		s.mu.Lock()
		var start *agent
		for start == nil && len(s.queue) > 0 && !s.closing {
			// reserveLocked takes sl out of the queue.
			sl := s.queue[0]
			a, err := s.reserveLocked(sl, sl.queued)
			if errors.Is(err, ErrAtCapacity) {
				break
			}
			if err != nil {
				// Backing off: the bus routes the message again when
				// its retry is due.
				s.log.Warn("a conversation waiting for a place gets no agent", "agent_id", sl.agentID, "topic", sl.topic, "err", err)
				s.queue = s.queue[1:]
				sl.queued = ""
			}
			start = a
		}
		if start == nil && (len(s.queue) == 0 || s.closing) {
			s.serving = false
			s.mu.Unlock()
			return
		}
		var victims []*agent
		var freed chan struct{}
		if start == nil {
			victims = s.makeRoomLocked()
			freed = s.freed
		}
		s.mu.Unlock()
		if start != nil {
			s.launch(start)
			continue
		}
		for _, v := range victims {
			s.terminate(v)
		}
		<-freed
	}
}

// remember records a new slot's agent id in the data dir, so a restarted
// spawner gives the topic the same id. A failure costs only that, so it
// is logged and the agent starts all the same.
func (s *Spawner) remember(sl *slot) {
	if err := s.state.put(sl.topic, sl.agentID); err != nil {
		s.log.Error("the agent id of a topic is not kept across a restart", "agent_id", sl.agentID, "topic", sl.topic, "err", err)
	}
}

// makeRoomLocked hibernates the least recently used idle agents for the
// conversations that wait for a place (in acquire, and in the queue), as
// many as wait less those already stopping. It returns the agents the
// caller must terminate.
func (s *Spawner) makeRoomLocked() []*agent {
	// Every agent stopping, whatever for, frees a place when it exits.
	need := s.waiting + len(s.queue)
	var idle []*agent
	for _, a := range s.agents {
		switch {
		case a.stopping:
			need--
		case s.idleLocked(a):
			idle = append(idle, a)
		}
	}
	if need <= 0 || len(idle) == 0 {
		return nil
	}
	slices.SortFunc(idle, func(a, b *agent) int { return a.lastActive.Compare(b.lastActive) })
	victims := idle[:min(need, len(idle))]
	for _, a := range victims {
		s.hibernateLocked(a, ReasonCapacity)
	}
	return victims
}

// idleLocked reports whether a may be hibernated now: it is ready, holds
// no delivery, and is not stopping. A new agent must first have answered
// a delivery (the message that started it is on its way) or have had
// SpawnTimeout to get one.
func (s *Spawner) idleLocked(a *agent) bool {
	return a.ready && !s.busyLocked(a) && !a.stopping && (a.served || time.Since(a.readyAt) >= s.opts.SpawnTimeout)
}

// busyLocked reports whether a holds a delivery: the bus said it became
// busy, and has not said it became idle since, for no longer than the
// bus's delivery timeout and busyMargin. Past that its idle event was
// lost (the spawner's own connection to the bus dropped meanwhile), as a
// delivery ends by the timeout at the latest; so an agent kept busy by
// deliveries that overlap without end counts as idle too.
func (s *Spawner) busyLocked(a *agent) bool {
	return a.busy && time.Since(a.lastActive) < s.busyLimit()
}

// busyMargin is how much longer than the bus's delivery timeout an agent
// counts as busy without an idle event: the event's way from the bus.
const busyMargin = 10 * time.Second

// busyLimit is how long an agent counts as busy without an idle event.
func (s *Spawner) busyLimit() time.Duration {
	return s.deliveryTimeout + busyMargin
}

// hibernateLocked marks a as stopping to hibernate; the caller then
// terminates it. Its exit is no failure, and its slot keeps its id for the
// next wake.
func (s *Spawner) hibernateLocked(a *agent, reason string) {
	a.stopping = true
	a.hibernate = reason
	if a.idleTimer != nil {
		a.idleTimer.Stop()
	}
}

// armIdleLocked (re)starts a's idle timer from now, when idle agents are
// stopped at all.
func (s *Spawner) armIdleLocked(a *agent) {
	if s.opts.IdleTimeout <= 0 {
		return
	}
	if a.idleTimer == nil {
		a.idleTimer = time.AfterFunc(s.opts.IdleTimeout, func() { s.expireIdle(a) })
		return
	}
	a.idleTimer.Reset(s.opts.IdleTimeout)
}

// expireIdle hibernates a when it has had no delivery for IdleTimeout,
// and a new agent not before SpawnTimeout if none came.
func (s *Spawner) expireIdle(a *agent) {
	s.mu.Lock()
	if a.stopping || !a.ready {
		s.mu.Unlock()
		return
	}
	due := a.lastActive.Add(s.opts.IdleTimeout)
	if a.busy {
		// Its idle event arms the timer again; without one, it is
		// idle from when it stops counting as busy.
		due = a.lastActive.Add(s.busyLimit() + s.opts.IdleTimeout)
	}
	if !a.served {
		due = latest(due, a.readyAt.Add(s.opts.SpawnTimeout))
	}
	if rest := time.Until(due); rest > 0 {
		a.idleTimer.Reset(rest)
		s.mu.Unlock()
		return
	}
	s.hibernateLocked(a, ReasonIdle)
	s.mu.Unlock()
	s.terminate(a)
}

// latest returns the later of a and b.
func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// freedLocked wakes the conversations waiting for a place: an agent
// exited, or one became idle and can make room.
func (s *Spawner) freedLocked() {
	close(s.freed)
	s.freed = make(chan struct{})
}

// goWakeLocked runs wakeFor(sl, reason), for shutdown to wait for,
// unless the spawner is closing.
func (s *Spawner) goWakeLocked(sl *slot, reason string) {
	if !s.closing {
		s.wakes.Go(func() { s.wakeFor(sl, reason) })
	}
}

// wakeFor starts sl's agent again for a message addressed to it while it
// was not running: the retry of a message the bus delivered to it as it
// stopped (ReasonRetry), which the bus addresses to the agent's id, or
// one the bus holds for it on a durable subscription (ReasonMessage).
func (s *Spawner) wakeFor(sl *slot, reason string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*s.opts.SpawnTimeout)
	defer cancel()
	if err := s.Wake(ctx, sl.topic, reason); err != nil {
		s.log.Warn("could not wake an agent for a message addressed to it", "agent_id", sl.agentID, "topic", sl.topic, "reason", reason, "err", err)
	}
}
