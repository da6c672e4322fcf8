package protocol

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Method names.
const (
	MethodInitialize     = "initialize"
	MethodSubscribe      = "subscribe"
	MethodUnsubscribe    = "unsubscribe"
	MethodSendMessage    = "sendMessage"
	MethodProcessMessage = "processMessage" // bus → subscriber
	MethodPing           = "ping"
)

// MaxClientIDBytes bounds a clientId.
const MaxClientIDBytes = 256

// ClientInfo describes the software behind a connection.
type ClientInfo struct {
	Name    string `json:"name,omitempty"`
	Version string `json:"version,omitempty"`
}

// InitializeParams are the params of initialize, the first call on every
// connection.
//
// A PublishOnly connection only publishes (and calls the dlq.* methods):
// it cannot subscribe, so it neither takes over nor is taken over by the
// connection that holds its clientId. Tools an agent runs, such as bub
// send-message, use it to publish as the agent without knocking the
// agent's own connection off the bus.
type InitializeParams struct {
	ClientID     string      `json:"clientId"`
	ClientInfo   *ClientInfo `json:"clientInfo,omitempty"`
	DefaultTopic string      `json:"defaultTopic,omitempty"`
	PublishOnly  bool        `json:"publishOnly,omitempty"`
	// Token is a credential for clients that cannot set the
	// Authorization header of the WebSocket upgrade (browsers). Either
	// place works; a token in both must be the same credential's.
	Token string `json:"token,omitempty"`
}

// Version is the protocol version this package describes, which
// initialize's result announces as protocolVersion.
const Version = 1

// ServerInfo names the bus software.
type ServerInfo struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// Capabilities says what the bus offers.
type Capabilities struct {
	Subscribe      bool     `json:"subscribe"`
	Publish        bool     `json:"publish"`
	ProcessMessage bool     `json:"processMessage"`
	Topics         []string `json:"topics"`
	Policies       []Policy `json:"policies"`
}

// InitializeResult is the result of initialize.
type InitializeResult struct {
	// ProtocolVersion is the version of the protocol the bus speaks
	// (Version): raised only by a change a peer written for the one
	// before could not follow (docs/COMPATIBILITY.md). Additions never
	// raise it; a bus that predates the field sends none (0), which
	// reads as version 1.
	ProtocolVersion int          `json:"protocolVersion,omitempty"`
	ServerID        string       `json:"serverId"`
	ServerInfo      ServerInfo   `json:"serverInfo"`
	Capabilities    Capabilities `json:"capabilities"`
	// Limits tells the peer the bounds it must stay within, so that it
	// can refuse an oversized message itself, with the limit named,
	// instead of losing the connection to a 1009 close. A bus that
	// predates it sends none.
	Limits *Limits `json:"limits,omitempty"`
}

// Limits are the bus's bounds that a peer can act on.
type Limits struct {
	// MaxMessageBytes is the largest WebSocket message the bus reads: a
	// whole JSON-RPC request, envelope included. A larger one closes
	// the connection with 1009.
	MaxMessageBytes int64 `json:"maxMessageBytes"`
	// DeliveryTimeoutMs is how long the bus waits for a subscriber's
	// answer to one processMessage, in milliseconds. A publisher waiting
	// for sendMessage's answer should wait longer than this.
	DeliveryTimeoutMs int64 `json:"deliveryTimeoutMs"`
}

// SubscribeParams are the params of subscribe. An empty Policy means the
// bus-wide default. A Fallback subscription receives a message only when
// no regular subscription matches it; a fallback that answers
// should_retry asks the bus to route the message again, which is how a
// default handler spawns an agent and then has the message delivered to
// it.
type SubscribeParams struct {
	Topic    string `json:"topic"`
	Policy   Policy `json:"policy,omitempty"`
	Fallback bool   `json:"fallback,omitempty"`
	// Durable makes the subscription the clientId's, not the
	// connection's: it outlives disconnects and restarts of the bus, and
	// messages matching it while its owner is away are held for the
	// owner (docs/PROTOCOL.md, "Durable subscriptions"). It needs a
	// grant with durable: true.
	Durable bool `json:"durable,omitempty"`
}

// UnsubscribeParams are the params of unsubscribe: the exact pattern string
// given to subscribe.
type UnsubscribeParams struct {
	Topic string `json:"topic"`
}

// SuccessResult is the result of subscribe and unsubscribe.
type SuccessResult struct {
	Success bool `json:"success"`
}

// SendMessageParams are the params of sendMessage. An empty Topic means the
// connection's defaultTopic.
type SendMessageParams struct {
	Topic   string          `json:"topic,omitempty"`
	Payload json.RawMessage `json:"payload"`
	Meta    json.RawMessage `json:"meta,omitempty"`
}

// Ack is one subscriber's answer to one delivery, as the publisher sees it.
type Ack struct {
	ClientID        string `json:"client_id"`
	Subscription    string `json:"subscription"`
	Processed       bool   `json:"processed"`
	Message         string `json:"message,omitempty"`
	StopPropagation bool   `json:"stopPropagation"`
	// Error says why the delivery failed (timeout, error response,
	// connection lost); empty when the subscriber answered.
	Error string `json:"error,omitempty"`
	// Retrying is true when the bus scheduled another attempt for this
	// subscriber: it asked for one or the delivery failed, and no
	// subscriber of the pass handled the message. Attempt is the number
	// of that next attempt and NextAttempt when it is due (RFC 3339).
	Retrying    bool   `json:"retrying,omitempty"`
	Attempt     int    `json:"attempt,omitempty"`
	NextAttempt string `json:"next_attempt,omitempty"`
	// Held is true when the subscriber is a durable subscriber that is
	// away: the message is held for it, and delivered when it is back
	// (NextAttempt says when its hold lifetime ends).
	Held bool `json:"held,omitempty"`
	// DeadLetter is the id of the dead letter the bus made of this
	// delivery, when the subscriber answered reject and no subscriber of
	// the pass handled the message.
	DeadLetter string `json:"dead_letter,omitempty"`
}

// SendMessageResult is the result of sendMessage, returned once every
// delivery of the routing pass has answered or failed.
type SendMessageResult struct {
	// Success is true when the message was routed to at least one
	// subscriber.
	Success   bool   `json:"success"`
	MessageID string `json:"messageId"`
	Acks      []Ack  `json:"acks"`
	// Reason explains a false Success, such as "no_subscribers".
	Reason string `json:"reason,omitempty"`
	// Held is true when nobody subscribes yet but the topic matches a
	// hold pattern: the bus keeps the message and routes it again at
	// NextAttempt (RFC 3339), or as soon as a matching subscription
	// appears.
	Held        bool   `json:"held,omitempty"`
	NextAttempt string `json:"next_attempt,omitempty"`
}

// NoSubscribers reports that the message reached nobody and the bus did
// not keep it: no subscription matched and the topic is not held. A held
// message is not one of those (Held; it is delivered once a subscriber
// appears), nor is one whose subscribers failed (their acks say so).
func (r *SendMessageResult) NoSubscribers() bool {
	return r.Reason == ReasonNoSubscribers && !r.Held
}

// Reasons a sendMessage result or a dead letter can carry.
const (
	ReasonNoSubscribers  = "no_subscribers"  // nobody subscribed (after holding, if the topic is held)
	ReasonMaxRetries     = "max_retries"     // every attempt asked for a retry or failed
	ReasonSubscriberGone = "subscriber_gone" // the last attempt found the subscriber absent or unsubscribed
	ReasonRejected       = "rejected"        // the subscriber answered reject: true, or a retry attempt processed: false without should_retry
)

// ProcessMessageParams are the params of processMessage, the bus's call on
// a subscriber. Subscription is the pattern whose subscription matched, so
// a client with several subscriptions knows which handler to run.
type ProcessMessageParams struct {
	Topic        string          `json:"topic"`
	Subscription string          `json:"subscription"`
	Payload      json.RawMessage `json:"payload"`
	MessageID    string          `json:"messageId"`
	From         string          `json:"from"`
	Meta         json.RawMessage `json:"meta,omitempty"`
	Attempt      int             `json:"attempt"`
}

// ProcessMessageResult is a subscriber's answer to processMessage. The base
// protocol's {success, stopPropagation} is accepted too: Success counts as
// Processed (see Handled).
type ProcessMessageResult struct {
	Processed    bool    `json:"processed"`
	ShouldRetry  bool    `json:"should_retry"`
	RetrySeconds float64 `json:"retry_seconds"`
	// Reject refuses the message for good, on any attempt: the bus
	// dead-letters it at once with ReasonRejected and Message as the
	// subscriber's reason. It outweighs ShouldRetry and is ignored when
	// the message was handled (see Rejected).
	Reject          bool   `json:"reject,omitempty"`
	Message         string `json:"message,omitempty"`
	StopPropagation bool   `json:"stopPropagation"`
	Success         bool   `json:"success,omitempty"`
}

// Rejected reports whether the subscriber refused the message for good:
// Reject without having handled it.
func (r ProcessMessageResult) Rejected() bool {
	return r.Reject && !r.Handled()
}

// Handled reports whether the subscriber processed the message, under
// either the extended or the base protocol's field.
func (r ProcessMessageResult) Handled() bool {
	return r.Processed || r.Success
}

// PingResult is the result of ping: the bus's clock, RFC 3339 in UTC.
type PingResult struct {
	Timestamp string `json:"timestamp"`
}

// ValidateClientID checks a clientId: non-empty, at most MaxClientIDBytes,
// valid UTF-8, no whitespace or control characters.
func ValidateClientID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("clientId is required")
	case len(id) > MaxClientIDBytes:
		return fmt.Errorf("clientId is %d bytes, more than %d", len(id), MaxClientIDBytes)
	case !utf8.ValidString(id):
		return fmt.Errorf("clientId %q is not valid UTF-8", id)
	}
	if i := strings.IndexFunc(id, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }); i >= 0 {
		return fmt.Errorf("clientId %q has whitespace or a control character at byte %d", id, i)
	}
	return nil
}

// IsObject reports whether raw JSON is an object; raw is assumed valid.
func IsObject(raw json.RawMessage) bool {
	for _, c := range raw {
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		}
		return c == '{'
	}
	return false
}
