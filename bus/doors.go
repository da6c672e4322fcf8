package bus

import (
	"errors"
	"fmt"
	"time"

	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/protocol"
)

// What the core lends an add-on that opens a door of its own (an HTTP
// endpoint, a JSON-RPC method, the callback topics): its answers are
// the core's (errors, JSON, rate limits), its checks are the core's
// (params, browsers), and a message it sends on the bus's behalf goes
// the core's way. The add-on serves the door; the core keeps what
// every door must do alike.

// A CallbackFunc takes an event a peer sends with sendMessage to a
// callback topic, protocol.CallbackTopicPrefix followed by id: the bus
// routes such a send to nobody and answers it with what f returns,
// sendMessage's result or an error (protocol.Errorf) the peer gets as
// it is. The core has checked the topic and the peer's topic rules;
// event is the send's payload, read-only.
type CallbackFunc func(id string, event []byte) (*protocol.SendMessageResult, error)

// HandleCallbacks makes f take what peers send to the callback topics
// (tool subscriptions). Without it such a send is refused as naming no
// active callback; a second f is refused. HandleCallbacks may be called
// only from Extend.
func (s *Server) HandleCallbacks(f CallbackFunc) error {
	s.mustExtend("HandleCallbacks")
	if s.callbacks != nil {
		return errors.New("the callback topics are handled already")
	}
	s.callbacks = f
	return nil
}

// callbackEvent hands a sendMessage to callback:{id} to the
// CallbackFunc.
func (s *Server) callbackEvent(id string, event []byte) (*protocol.SendMessageResult, error) {
	if s.callbacks == nil {
		return nil, protocol.Errorf(protocol.ErrNotFound, "no active tool subscription has this callback: this bus keeps none")
	}
	return s.callbacks(id, event)
}

// PublishBestEffort publishes m as a notice the bus sends for someone:
// at once, past the publishers' limits, with no retry, hold or dead
// letter, its walk on a goroutine of its own. It reports whether anyone
// subscribes to m's topic now to take it. m is the bus's from then on:
// it is named (ID, Published) as it is published.
func (s *Server) PublishBestEffort(m *store.Message) bool {
	chain := s.router.route(m.Topic)
	if len(chain) == 0 {
		return false
	}
	go func() { _, _ = s.publishRouted(m, nil, chain, nil, false) }()
	return true
}

// RateLimitedError is the -32012 error of a request refused for its
// rate until wait has passed: why says whose rate, and its data the
// wait in milliseconds (at least 1), which WriteError turns into
// Retry-After.
func RateLimitedError(wait time.Duration, why string) error {
	ms := max(1, (wait+time.Millisecond-1)/time.Millisecond)
	return &protocol.Error{
		Code:    protocol.CodeRateLimited,
		Message: fmt.Sprintf("%s: %s; retry after %d ms", protocol.ErrRateLimited.Message, why, ms),
		Data:    protocol.RateLimitedData{RetryAfterMS: int64(ms)},
	}
}
