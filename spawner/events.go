package spawner

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/bub-bus/bub/peer"
)

// Topics of the agent lifecycle events the spawner publishes. They are
// system: topics, not agent: ones, on purpose: agent:* is both a hold
// pattern of the bus and a fallback pattern of the spawner, so an event
// published there would be held, or would make the spawner spawn an agent
// for its own event.
const (
	TopicSpawned     = "system:agent.spawned"
	TopicReady       = "system:agent.ready"
	TopicExited      = "system:agent.exited"
	TopicSpawnFailed = "system:agent.spawn_failed"
	TopicHibernated  = "system:agent.hibernated"
	TopicWoken       = "system:agent.woken"
)

// Event names, the "event" field of an Event.
const (
	EventSpawned     = "spawned"
	EventReady       = "ready"
	EventExited      = "exited"
	EventSpawnFailed = "spawn_failed"
	EventHibernated  = "hibernated"
	EventWoken       = "woken"
)

// EventType is the payload "type" of every lifecycle event, the spec's
// agent_event.
const EventType = "agent_event"

// Event is the payload of an agent lifecycle event.
type Event struct {
	// Type is always EventType.
	Type string `json:"type"`
	// Event is EventSpawned, EventReady, EventExited, EventSpawnFailed,
	// EventHibernated or EventWoken.
	Event string `json:"event"`
	// AgentID is the agent's BUB_AGENT_ID, its clientId on the bus.
	AgentID string `json:"agent_id"`
	// Topic is the agent's BUB_DEFAULT_TOPIC, the topic it was spawned
	// for.
	Topic string `json:"topic"`
	// Workspace is the agent's BUB_WORKSPACE.
	Workspace string `json:"workspace,omitempty"`
	// PID is the agent's process id (spawned, ready, exited).
	PID int `json:"pid,omitempty"`
	// Status is how the process ended, as Go words it: "exit status 1",
	// "signal: killed" (exited).
	Status string `json:"status,omitempty"`
	// ExitCode is the process's exit code, -1 when a signal ended it
	// (exited).
	ExitCode *int `json:"exit_code,omitempty"`
	// Restarting is true when the spawner will start the agent again, with
	// the same id, at NextStart (exited, spawn_failed).
	Restarting bool   `json:"restarting,omitempty"`
	NextStart  string `json:"next_start,omitempty"`
	// Error says why a spawn failed (spawn_failed).
	Error string `json:"error,omitempty"`
	// Reason says why the agent was hibernated (ReasonIdle,
	// ReasonCapacity) or woken (ReasonMessage, ReasonRetry, ReasonToolEvent, or another a
	// caller of Wake gave).
	Reason string `json:"reason,omitempty"`
	// Timestamp is when it happened, RFC 3339 with nanoseconds.
	Timestamp string `json:"timestamp"`
}

// eventTopic returns the topic an event of kind name is published on.
func eventTopic(name string) string {
	switch name {
	case EventSpawned:
		return TopicSpawned
	case EventReady:
		return TopicReady
	case EventExited:
		return TopicExited
	case EventHibernated:
		return TopicHibernated
	case EventWoken:
		return TopicWoken
	default:
		return TopicSpawnFailed
	}
}

// eventQueueSize bounds the events waiting to be published. Publishing
// waits for every subscriber's answer, so a slow subscriber must not hold
// up spawning; past this, events are dropped with a warning.
const eventQueueSize = 1024

// publisher publishes lifecycle events in the order they happened, on one
// goroutine, so that no spawn waits for an event's subscribers.
type publisher struct {
	log   *slog.Logger
	queue chan Event
	done  chan struct{}

	// mu guards closed, so nothing is sent on a closed queue.
	mu     sync.Mutex
	closed bool
}

func newPublisher(log *slog.Logger) *publisher {
	return &publisher{log: log, queue: make(chan Event, eventQueueSize), done: make(chan struct{})}
}

// run publishes queued events on conn until the queue is closed and empty.
func (p *publisher) run(conn *peer.Conn) {
	defer close(p.done)
	for ev := range p.queue {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := conn.SendMessage(ctx, eventTopic(ev.Event), ev, nil)
		cancel()
		if err != nil {
			p.log.Warn("publish agent event", "event", ev.Event, "agent_id", ev.AgentID, "err", err)
		}
	}
}

// publish queues ev, stamping its type and time, and logs it.
func (p *publisher) publish(ev Event) {
	ev.Type = EventType
	ev.Timestamp = time.Now().UTC().Format(time.RFC3339Nano)
	attrs := []any{"agent_id", ev.AgentID, "topic", ev.Topic}
	if ev.PID != 0 {
		attrs = append(attrs, "pid", ev.PID)
	}
	if ev.Status != "" {
		attrs = append(attrs, "status", ev.Status)
	}
	if ev.Error != "" {
		attrs = append(attrs, "err", ev.Error)
	}
	if ev.Reason != "" {
		attrs = append(attrs, "reason", ev.Reason)
	}
	if ev.Restarting {
		attrs = append(attrs, "next_start", ev.NextStart)
	}
	level := slog.LevelInfo
	if ev.Event == EventSpawnFailed || (ev.Event == EventExited && ev.ExitCode != nil && *ev.ExitCode != 0) {
		level = slog.LevelWarn
	}
	p.log.Log(context.Background(), level, "agent "+ev.Event, attrs...)

	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	select {
	case p.queue <- ev:
	default:
		p.log.Warn("agent event dropped: the publish queue is full", "event", ev.Event, "agent_id", ev.AgentID)
	}
}

// close stops taking events and waits, up to timeout, for the queued ones
// to be published. The publisher must have been started with run.
func (p *publisher) close(timeout time.Duration) {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.queue)
	}
	p.mu.Unlock()
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.log.Warn("agent events still unpublished at shutdown", "waited", timeout)
	}
}
