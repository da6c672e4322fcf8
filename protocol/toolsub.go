package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Tool subscriptions (seed rap-subscription-events.md; docs/PROTOCOL.md,
// "Tool subscriptions"): an agent asks the bus for a callback, hands it
// to a tool with its tool call, and the tool's subscription_event
// messages reach the agent, woken if it is hibernated, as bus messages on
// the subscription's topic.
const (
	// MethodToolSubscriptionStart records a subscription and returns its
	// callback.
	MethodToolSubscriptionStart = "toolSubscriptions.start"
	// MethodToolSubscriptionCancel removes one and tells its tool.
	MethodToolSubscriptionCancel = "toolSubscriptions.cancel"
	// MethodToolSubscriptionList lists a thread's subscriptions.
	MethodToolSubscriptionList = "toolSubscriptions.list"
)

// Payload types of tool subscriptions.
const (
	// TypeSubscriptionEvent is an event a tool posts to a callback, and
	// the payload the bus delivers it as.
	TypeSubscriptionEvent = "subscription_event"
	// TypeCancelToolCall is the best-effort notification a tool gets on
	// its topic when the agent cancels the subscription (the seed's
	// /cancel_tool_call).
	TypeCancelToolCall = "cancel_tool_call"
)

// CallbackTopicPrefix starts the topic a tool that is a bus peer sends a
// subscription's events to: callback:{id}. The bus takes such a
// sendMessage itself; it is never routed to a subscriber.
const CallbackTopicPrefix = "callback:"

// PathCallbacks starts the HTTP path a tool posts a subscription's events
// to: /v1/callbacks/{id}.
const PathCallbacks = "/v1/callbacks/"

// SubscriptionEvent is one event of a tool subscription, as the tool
// posts it and as the agent receives it.
type SubscriptionEvent struct {
	Type       string `json:"type"`
	GroupID    string `json:"group_id"`
	ToolCallID string `json:"tool_call_id"`
	// Text is the event's payload, JSON-encoded for structured data.
	Text string `json:"text"`
	// Associative asks that the event go inline into the subscribing
	// thread rather than to a child thread.
	Associative bool `json:"associative,omitempty"`
	// Final is the subscription's last event: the bus removes the
	// subscription, and takes no event after it.
	Final bool `json:"final,omitempty"`
}

// ParseSubscriptionEvent reads a subscription_event: a JSON object with
// type "subscription_event", non-empty group_id and tool_call_id strings,
// a text string, and associative and final booleans when present. Other
// members are ignored. The error names the field at fault.
func ParseSubscriptionEvent(b []byte) (*SubscriptionEvent, error) {
	b = bytes.TrimSpace(b)
	if !json.Valid(b) {
		return nil, fmt.Errorf("the body is not valid JSON; send a subscription_event object")
	}
	if !IsObject(b) {
		return nil, fmt.Errorf("the body must be a JSON object, a subscription_event")
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return nil, fmt.Errorf("the body must be a JSON object: %v", err)
	}
	for k := range fields {
		for _, name := range subscriptionEventFields {
			if k != name && strings.EqualFold(k, name) {
				return nil, fmt.Errorf("%s: the field is %s, in lower case", k, name)
			}
		}
	}
	var ev SubscriptionEvent
	for _, f := range []struct {
		name     string
		s        *string
		b        *bool
		required bool
	}{
		{name: "type", s: &ev.Type, required: true},
		{name: "group_id", s: &ev.GroupID, required: true},
		{name: "tool_call_id", s: &ev.ToolCallID, required: true},
		{name: "text", s: &ev.Text, required: true},
		{name: "associative", b: &ev.Associative},
		{name: "final", b: &ev.Final},
	} {
		raw, ok := fields[f.name]
		if !ok {
			if f.required {
				return nil, fmt.Errorf("%s is required", f.name)
			}
			continue
		}
		if f.s != nil {
			if json.Unmarshal(raw, f.s) != nil || raw[0] != '"' {
				return nil, fmt.Errorf("%s must be a string", f.name)
			}
			if *f.s == "" && f.name != "text" {
				return nil, fmt.Errorf("%s must not be empty", f.name)
			}
			continue
		}
		if json.Unmarshal(raw, f.b) != nil || (raw[0] != 't' && raw[0] != 'f') {
			return nil, fmt.Errorf("%s must be a boolean", f.name)
		}
	}
	if ev.Type != TypeSubscriptionEvent {
		return nil, fmt.Errorf("type must be %q, not %q", TypeSubscriptionEvent, ev.Type)
	}
	if len(ev.GroupID) > MaxToolSubscriptionIDBytes {
		return nil, fmt.Errorf("group_id is longer than %d bytes", MaxToolSubscriptionIDBytes)
	}
	if len(ev.ToolCallID) > MaxToolSubscriptionIDBytes {
		return nil, fmt.Errorf("tool_call_id is longer than %d bytes", MaxToolSubscriptionIDBytes)
	}
	return &ev, nil
}

// subscriptionEventFields are the members of a subscription_event.
var subscriptionEventFields = []string{"type", "group_id", "tool_call_id", "text", "associative", "final"}

// MaxToolSubscriptionIDBytes bounds a group_id and a tool_call_id.
const MaxToolSubscriptionIDBytes = 256

// ToolSubscriptionStartParams are the params of toolSubscriptions.start.
type ToolSubscriptionStartParams struct {
	// GroupID is the thread the subscription belongs to.
	GroupID string `json:"group_id"`
	// ToolCallID is the id of the tool call that starts it.
	ToolCallID string `json:"tool_call_id"`
	// Topic is where its events are delivered, as messages from the
	// caller: a topic the caller may publish to.
	Topic string `json:"topic"`
	// Tool, when the tool is a bus peer, is the topic it takes the
	// cancel_tool_call notification on. Optional.
	Tool string `json:"tool,omitempty"`
}

// ToolSubscriptionStartResult is the callback of a new subscription. The
// id is a secret shown only here: whoever holds it can post events.
type ToolSubscriptionStartResult struct {
	// CallbackPath is the HTTP path to POST events to, on the bus's
	// address: /v1/callbacks/{id}.
	CallbackPath string `json:"callback_path"`
	// CallbackTopic is the topic a bus peer sends events to instead:
	// callback:{id}.
	CallbackTopic string `json:"callback_topic"`
}

// ToolSubscriptionCancelParams are the params of toolSubscriptions.cancel.
type ToolSubscriptionCancelParams struct {
	GroupID    string `json:"group_id"`
	ToolCallID string `json:"tool_call_id"`
}

// ToolSubscriptionCancelResult says the subscription is gone and whether
// its tool was sent cancel_tool_call.
type ToolSubscriptionCancelResult struct {
	Cancelled bool `json:"cancelled"`
	// Notified: a cancel_tool_call was published to the subscription's
	// tool topic and someone took it.
	Notified bool `json:"notified"`
}

// ToolSubscriptionListParams are the params of toolSubscriptions.list:
// one thread's subscriptions, or, for an admin with no group_id, all.
type ToolSubscriptionListParams struct {
	GroupID string `json:"group_id,omitempty"`
}

// ToolSubscription is an active subscription as toolSubscriptions.list
// shows it; never with its callback.
type ToolSubscription struct {
	GroupID    string    `json:"group_id"`
	ToolCallID string    `json:"tool_call_id"`
	Topic      string    `json:"topic"`
	Tool       string    `json:"tool,omitempty"`
	Owner      string    `json:"owner"`
	Created    time.Time `json:"created"`
}

// ToolSubscriptionListResult is the answer of toolSubscriptions.list.
type ToolSubscriptionListResult struct {
	Subscriptions []ToolSubscription `json:"subscriptions"`
}

// CancelToolCall is the payload of the cancel_tool_call notification.
type CancelToolCall struct {
	Type       string `json:"type"`
	ToolCallID string `json:"tool_call_id"`
	ThreadID   string `json:"thread_id"`
}

// Payload types of a tool call over the bus, from an agent to a tool
// that is a bus peer (docs/PROTOCOL.md, "Tool subscriptions").
const (
	// TypeToolCall invokes a tool: the message an agent sends to the
	// tool's topic.
	TypeToolCall = "tool_call"
	// TypeToolResult is the tool's answer, in the message of its ack.
	TypeToolResult = "tool_result"
)

// ToolCall is a tool invocation. For a subscription tool it carries the
// callback the tool posts its events to.
type ToolCall struct {
	Type string `json:"type"`
	// ID is the tool call's id: the tool_call_id of its events.
	ID string `json:"id"`
	// GroupID is the calling thread: the group_id of its events.
	GroupID   string          `json:"group_id"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	// CallbackURL is where the tool POSTs its subscription_event
	// messages; CallbackTopic is where a bus peer may send them instead.
	CallbackURL   string `json:"callback_url,omitempty"`
	CallbackTopic string `json:"callback_topic,omitempty"`
}

// ToolResult is a tool's answer to a ToolCall. A subscription tool sets
// Subscription once it has stored the callback.
type ToolResult struct {
	Type         string `json:"type"`
	ID           string `json:"id"`
	Text         string `json:"text"`
	Subscription bool   `json:"subscription,omitempty"`
	IsError      bool   `json:"is_error,omitempty"`
}
