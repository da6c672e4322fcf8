package bus

import (
	"context"
	"encoding/json"
	"time"

	"github.com/bub-bus/bub/bus/store"
)

// System topics the bus publishes its own events to. They are ordinary
// messages, from the bus's serverId, whose payload has a type like every
// other.
const (
	TopicClientConnected    = "system:client.connected"
	TopicClientDisconnected = "system:client.disconnected"
	TopicClientSubscribed   = "system:client.subscribed"
	TopicClientUnsubscribed = "system:client.unsubscribed"
	TopicDeadLettered       = "system:message.dead_lettered"
)

// eventQueueSize bounds the events waiting to be published; beyond it
// events are dropped (and counted) rather than slowing the bus down.
const eventQueueSize = 1024

type event struct {
	topic   string
	payload json.RawMessage
}

// clientEvent is the payload of the system:client.* events.
type clientEvent struct {
	Type     string `json:"type"` // always "client_event"
	Event    string `json:"event"`
	ClientID string `json:"client_id"`
	// Identity is the credential's name (docs/SECURITY.md); absent on
	// an open bus.
	Identity string `json:"identity,omitempty"`
	Pattern  string `json:"pattern,omitempty"`
	// Fallback is set on subscribed and unsubscribed events only, and then
	// always sent, false included: a reader (the spawner waits for
	// fallback: false) must not have to know that a missing field means
	// false. Other events have no subscription, so no fallback.
	Fallback  *bool  `json:"fallback,omitempty"`
	Reason    string `json:"reason,omitempty"`
	Timestamp string `json:"timestamp"`
}

func (s *Server) clientEvent(topic, name, clientID, identity, pattern string, fallback bool, reason string) {
	ev := clientEvent{
		Type: "client_event", Event: name, ClientID: clientID, Identity: identity, Pattern: pattern,
		Reason: reason, Timestamp: time.Now().UTC().Format(time.RFC3339Nano),
	}
	if topic == TopicClientSubscribed || topic == TopicClientUnsubscribed {
		ev.Fallback = &fallback
	}
	s.emit(topic, ev)
}

// emit queues a bus event. Events are published one at a time, in the
// order they happened, by one goroutine. They are not retried, held or
// dead-lettered themselves (that could loop); they go to whoever
// subscribes when they are published.
func (s *Server) emit(topic string, payload any) {
	data, err := json.Marshal(payload)
	if err != nil {
		s.log.Error("encode event", "topic", topic, "err", err)
		return
	}
	select {
	case s.events <- event{topic, data}:
	default:
		s.metrics.eventsDropped.Inc()
	}
}

// publishEvents publishes queued events until stop is closed.
func (s *Server) publishEvents(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case ev := <-s.events:
			_, _ = s.publish(context.Background(), &store.Message{Topic: ev.topic, From: s.opts.ServerID, Payload: ev.payload}, false)
		}
	}
}
