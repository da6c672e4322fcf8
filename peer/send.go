package peer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/bub-bus/bub/protocol"
)

// SendMessage publishes payload to topic and returns once every subscriber
// in the routing chain has answered, with their acks. An empty topic means
// Options.DefaultTopic. payload is a json.RawMessage (or []byte) sent as it
// is, or any value, marshalled to JSON; either way it must be a JSON object
// with a string "type", else the bus answers code -32602.
//
// A message that no subscription matched is not an error: the result has
// Success false and Reason "no_subscribers".
//
// SendMessage may be called from a handler; it does not block the Conn's
// other deliveries. It is not retried: after ErrDisconnected or
// ErrCallTimeout the message may or may not have been delivered. A
// message larger than the bus accepts (Conn.Limits) is refused before
// sending with ErrMessageTooBig.
func (c *Conn) SendMessage(ctx context.Context, topic string, payload any) (*protocol.SendMessageResult, error) {
	return c.SendMessageWithMeta(ctx, topic, payload, nil)
}

// SendMessageWithMeta is SendMessage with a meta object, such as
// {"traceparent": "..."}, which the bus passes to subscribers unchanged.
// meta is marshalled like payload; nil sends none.
func (c *Conn) SendMessageWithMeta(ctx context.Context, topic string, payload, meta any) (*protocol.SendMessageResult, error) {
	name := topic
	if name == "" {
		name = c.opts.DefaultTopic
	}
	params := protocol.SendMessageParams{Topic: topic}
	var err error
	if params.Payload, err = marshalJSON(payload); err != nil {
		return nil, fmt.Errorf("sendMessage %q: payload: %w", name, err)
	}
	if meta != nil {
		if params.Meta, err = marshalJSON(meta); err != nil {
			return nil, fmt.Errorf("sendMessage %q: meta: %w", name, err)
		}
	}
	// Marshalled here, once, to measure what the bus will read.
	raw, err := json.Marshal(params)
	if err != nil {
		return nil, fmt.Errorf("sendMessage %q: %w", name, err)
	}
	if limit := c.Limits().MaxMessageBytes; limit > 0 {
		if size := int64(len(raw) + requestOverhead); size > limit {
			return nil, fmt.Errorf("sendMessage %q: %w: the request is %d bytes, over the bus's limit of %d bytes (maxMessageBytes; bub serve --max-message-bytes)", name, ErrMessageTooBig, size, limit)
		}
	}
	var result protocol.SendMessageResult
	if err := c.call(ctx, protocol.MethodSendMessage, json.RawMessage(raw), &result); err != nil {
		return nil, fmt.Errorf("sendMessage %q: %w", name, err)
	}
	return &result, nil
}

// requestOverhead bounds what the JSON-RPC envelope adds to sendMessage's
// params: {"method":"sendMessage","params":,"id":N,"jsonrpc":"2.0"} with
// a 20-digit id is 70 bytes. Erring high only refuses a message within a
// few bytes of the limit, which the bus would refuse anyway next time.
const requestOverhead = 72

// marshalJSON returns v as JSON, taking raw JSON as it is once checked.
func marshalJSON(v any) (json.RawMessage, error) {
	var raw []byte
	switch v := v.(type) {
	case nil:
		return nil, errors.New("is nil")
	case json.RawMessage:
		raw = v
	case []byte:
		raw = v
	default:
		return json.Marshal(v)
	}
	if !json.Valid(raw) {
		return nil, errors.New("is not valid JSON")
	}
	return bytes.TrimSpace(raw), nil
}

// Ping asks the bus for its clock, which proves the connection works end
// to end.
func (c *Conn) Ping(ctx context.Context) (time.Time, error) {
	var result protocol.PingResult
	if err := c.call(ctx, protocol.MethodPing, struct{}{}, &result); err != nil {
		return time.Time{}, fmt.Errorf("ping: %w", err)
	}
	t, err := time.Parse(time.RFC3339, result.Timestamp)
	if err != nil {
		return time.Time{}, fmt.Errorf("ping: timestamp %q: %w", result.Timestamp, err)
	}
	return t, nil
}
