package bus

import (
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/protocol"
)

// System topics the bus publishes its own events to (protocol/events.go).
const (
	TopicClientConnected    = protocol.TopicClientConnected
	TopicClientDisconnected = protocol.TopicClientDisconnected
	TopicClientSubscribed   = protocol.TopicClientSubscribed
	TopicClientUnsubscribed = protocol.TopicClientUnsubscribed
	TopicDeadLettered       = protocol.TopicDeadLettered
)

// clientEventPrefix starts the topics whose events are never dropped: the
// spawner starts agents on them.
const clientEventPrefix = "system:client."

// eventQueueSize bounds the events waiting for one subscriber; beyond it
// that subscriber misses events other than system:client.* (dropped and
// counted) rather than holding more of them in memory.
const eventQueueSize = 1024

// maxEventBacklog bounds the system:client.* events waiting for one
// subscriber. They are never dropped, so a subscriber that answers each
// just inside the delivery timeout (never counted slow) while other peers
// churn subscriptions would otherwise grow its queue without end; past
// this it is disconnected instead, as a peer that does not keep up. Its
// reconnect starts from the state of things, which it can subscribe to
// anew.
var maxEventBacklog = 64 * eventQueueSize

// Reasons of bub_events_dropped_total.
const dropQueueFull = "subscriber_queue_full"

func (e *events) clientEvent(topic, name, clientID, identity, pattern string, fallback bool, reason string) {
	s := e.server
	ev := protocol.ClientEvent{
		Type: protocol.TypeClientEvent, Event: name, ClientID: clientID, Identity: identity, Pattern: pattern,
		Reason: reason, Timestamp: time.Now().UTC().Format(time.RFC3339Nano),
	}
	if topic == TopicClientSubscribed || topic == TopicClientUnsubscribed {
		ev.Fallback = &fallback
	}
	ev.Node = s.cl.self
	e.emit(topic, ev)
}

// emit publishes a bus event: it is routed now, to whoever subscribes now,
// and each subscriber in its chain gets it in turn through its own queue
// (see events). Events are not retried, held or dead-lettered themselves
// (that could loop). Callers hold no lock, and call emit in the order the
// events happened.
func (e *events) emit(topic string, payload any) {
	s := e.server
	data, err := json.Marshal(payload)
	if err != nil {
		s.log.Error("encode event", "topic", topic, "err", err)
		return
	}
	s.events.publish(&store.Message{Topic: topic, From: s.opts.ServerID, Payload: data})
}

// events delivers the bus's events. Every connection that has events
// waiting has a queue of its own, served by a goroutine that exists while
// the queue is not empty and hands the subscriber one event at a time, in
// the order they were emitted, whichever of its subscriptions they came
// under (a chain holds a client once). A subscriber that is slow to answer so
// delays only its own queue, and the events whose walk waits for its
// answer: those that reach it before a subscriber its policy may keep
// them from.
//
// Each event walks its chain as a published message does: a subscriber
// gets it once every subscriber before it that could stop propagation
// (Policy.MayStop) has answered without stopping it (Policy.Stops); the
// subscribers after one that cannot do not wait for its answer.
//
// Every event is routed and queued under mu, so any two events are queued
// in the same order for every subscriber they share. That is what keeps
// the queues from waiting on each other in a circle: the oldest event
// still queued heads every queue it is in.
type events struct {
	server *Server
	// busyListened and idleListened remember whether anyone subscribes
	// to the activity events (countDelivery, activity.go).
	busyListened, idleListened anyCache

	// mu guards everything below and the state of every eventWalk.
	// Lock order: after conn.mu, before router.mu (bus/doc.go).
	mu      sync.Mutex
	queues  map[subscriber]*eventQueue
	stopped bool
}

// eventWalk is one event on its way down its chain.
type eventWalk struct {
	msg   *store.Message
	chain []*subscription
	// open counts the subscribers, from the first, the event may go to
	// now; stopped is set when chain[open-1]'s answer stopped propagation,
	// and the rest of the chain will never get it.
	open    int
	stopped bool
}

// eventQueue is the events waiting for one subscriber, oldest first.
type eventQueue struct {
	to      subscriber
	entries []eventEntry
	// ready wakes the queue's goroutine when its head may go or will
	// never go; its lock is events.mu.
	ready sync.Cond
	// evicted is set once the queue's backlog has had its peer closed.
	evicted bool
}

// eventEntry is an event's place in one subscriber's queue: the walk and
// the subscription's position in its chain.
type eventEntry struct {
	walk *eventWalk
	at   int
}

func newEvents(s *Server) *events {
	return &events{server: s, queues: make(map[subscriber]*eventQueue)}
}

// publish routes m and queues it for each subscriber in its chain.
func (e *events) publish(m *store.Message) {
	s := e.server
	droppable := !strings.HasPrefix(m.Topic, clientEventPrefix)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped {
		return
	}
	m.ID = s.bootID + "-" + strconv.FormatUint(s.messageSeq.Add(1), 10)
	m.PublishedAt = time.Now()
	chain := s.router.route(m.Topic)
	if len(chain) == 0 {
		s.metrics.published.WithLabelValues(protocol.ReasonNoSubscribers).Inc()
		return
	}
	s.metrics.published.WithLabelValues("routed").Inc()
	// A subscriber whose queue is full leaves the chain, as a failed
	// delivery would: the others do not wait for it.
	w := &eventWalk{msg: m, chain: chain[:0]}
	for _, sub := range chain {
		q := e.queues[sub.to]
		if q != nil && droppable && len(q.entries) >= eventQueueSize {
			s.metrics.eventsDropped.WithLabelValues(m.Topic, dropQueueFull).Inc()
			continue
		}
		if q != nil && len(q.entries) >= maxEventBacklog {
			if !q.evicted {
				q.evicted = true
				// Not under mu: closing takes conn.mu, which comes first
				// in the lock order.
				go func(to subscriber, waiting int) {
					h := to.held()
					h.log.Warn("closing peer", "client", h.id(), "reason", closeEventBacklog, "events_waiting", waiting)
					to.close(websocket.StatusPolicyViolation, closeEventBacklog)
				}(sub.to, len(q.entries))
			}
			continue
		}
		if q == nil {
			q = &eventQueue{to: sub.to}
			q.ready.L = &e.mu
			e.queues[sub.to] = q
			s.work.Add(1)
			go e.serve(q)
		}
		q.entries = append(q.entries, eventEntry{w, len(w.chain)})
		w.chain = append(w.chain, sub)
	}
	e.advance(w)
}

// advance lets w go to the subscribers up to and including the next one
// that could stop it, and wakes their queues, which hold w until it has
// gone to them. Called with mu held, before stop.
func (e *events) advance(w *eventWalk) {
	for w.open < len(w.chain) {
		sub := w.chain[w.open]
		w.open++
		e.queues[sub.to].ready.Signal()
		if sub.policy.MayStop() {
			return
		}
	}
}

// answered records that chain[at] has had w, and whether its answer
// stopped propagation. Called with mu held.
func (e *events) answered(w *eventWalk, at int, stops bool) {
	if e.stopped || at != w.open-1 || !w.chain[at].policy.MayStop() {
		// Nothing waits on this answer: the queues are going, or the
		// subscriber's policy never stops the walk.
		return
	}
	if !stops {
		e.advance(w)
		return
	}
	w.stopped = true
	for _, sub := range w.chain[w.open:] {
		e.queues[sub.to].ready.Signal()
	}
}

// serve delivers q's events in order until q is empty or the bus stops.
func (e *events) serve(q *eventQueue) {
	defer e.server.work.Done()
	e.mu.Lock()
	defer e.mu.Unlock()
	for !e.stopped && len(q.entries) > 0 {
		head := q.entries[0]
		w := head.walk
		if head.at >= w.open && !w.stopped {
			q.ready.Wait()
			continue
		}
		stops := false
		if head.at < w.open {
			e.mu.Unlock()
			stops = e.deliver(w.msg, w.chain[head.at])
			e.mu.Lock()
		}
		q.entries[0] = eventEntry{}
		q.entries = q.entries[1:]
		e.answered(w, head.at, stops)
	}
	delete(e.queues, q.to)
}

// deliver hands m to sub, unless sub is gone, and reports whether its
// answer stops propagation under sub's policy.
func (e *events) deliver(m *store.Message, sub *subscription) bool {
	s, h, pattern := e.server, sub.to.held(), sub.pattern.String()
	h.mu.Lock()
	live, clientID := h.subs[pattern] == sub, h.clientID
	h.mu.Unlock()
	if !live {
		// Unsubscribed or disconnected since the event was routed.
		return false
	}
	d := &delivery{Message: m, ClientID: clientID, Subscription: pattern, Attempt: 1, to: sub.to}
	r, err := s.pipe.deliver(s.ctx, d)
	return err == nil && sub.policy.Stops(r.Handled(), r.StopPropagation)
}

// stop ends event delivery for Shutdown: no event is queued from now on,
// and each queue's goroutine ends after the delivery it is making.
func (e *events) stop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.stopped = true
	for _, q := range e.queues {
		q.ready.Broadcast()
	}
}
