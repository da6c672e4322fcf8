package bus

import (
	"context"
	"encoding/json"
	"time"

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

// eventQueueSize bounds the events waiting to be published; beyond it
// events are dropped (and counted) rather than slowing the bus down.
const eventQueueSize = 1024

type event struct {
	topic   string
	payload json.RawMessage
}

func (s *Server) clientEvent(topic, name, clientID, identity, pattern string, fallback bool, reason string) {
	ev := protocol.ClientEvent{
		Type: protocol.TypeClientEvent, Event: name, ClientID: clientID, Identity: identity, Pattern: pattern,
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
