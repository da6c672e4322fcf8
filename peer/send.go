package peer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/bub-bus/bub/internal/jsonscan"
	"github.com/bub-bus/bub/internal/rpcstream"
	"github.com/bub-bus/bub/protocol"
)

// SendOptions configure one SendMessage. A nil *SendOptions means the
// defaults.
type SendOptions struct {
	// Meta is an object such as {"traceparent": "..."}, which the bus
	// passes to subscribers unchanged; it is encoded like the payload.
	// Default: none.
	Meta any
	// Timeout bounds the wait for the answer in place of
	// Options.CallTimeout; the bus answers only once every subscriber in
	// the chain has, so a long chain may need more. Default:
	// Options.CallTimeout.
	Timeout time.Duration
}

// SendMessage publishes payload to topic and returns once every subscriber
// in the routing chain has answered, with their acks. An empty topic means
// Options.DefaultTopic. payload is a json.RawMessage (or []byte), sent
// byte for byte as it is, or any value, marshalled to JSON; either way it
// must be a JSON object with a string "type", else the bus answers code
// -32602. Raw bytes that are not valid JSON, or not valid UTF-8 (for
// which the bus would close the connection with 1007), are refused
// before sending. opts may be nil.
//
// A message that no subscription matched is not an error: the result's
// NoSubscribers reports it (a held message is not one of those; see
// protocol.SendMessageResult).
//
// SendMessage may be called from a handler; it does not block the Conn's
// other deliveries. It is not retried: after ErrDisconnected or
// ErrCallTimeout the message may or may not have been delivered. A
// message larger than the bus accepts (Conn.Limits) is refused before
// sending with ErrMessageTooBig.
func (c *Conn) SendMessage(ctx context.Context, topic string, payload any, opts *SendOptions) (*protocol.SendMessageResult, error) {
	var o SendOptions
	if opts != nil {
		o = *opts
	}
	name := topic
	if name == "" {
		name = c.opts.DefaultTopic
	}
	body, err := encodeJSON(payload)
	if err != nil {
		return nil, fmt.Errorf("sendMessage %q: payload: %w", name, err)
	}
	var meta []byte
	if o.Meta != nil {
		if meta, err = encodeJSON(o.Meta); err != nil {
			return nil, fmt.Errorf("sendMessage %q: meta: %w", name, err)
		}
	}
	// Appended straight into the request's frame, so the payload is
	// copied once per send, into a pooled buffer, not twice; the params
	// live in the call's pooled waiter, not in an allocation of their own.
	w := getWaiter()
	defer w.put()
	w.send = sendRequest{topic: topic, payload: body, meta: meta}
	if limit := c.Limits().MaxMessageBytes; limit > 0 {
		if size := int64(w.send.size() + requestOverhead); size > limit {
			return nil, fmt.Errorf("sendMessage %q: %w: the request is %d bytes, over the bus's limit of %d bytes (maxMessageBytes; bub serve --max-message-bytes)", name, ErrMessageTooBig, size, limit)
		}
	}
	s, err := c.current()
	if err != nil {
		return nil, fmt.Errorf("sendMessage %q: %w", name, err)
	}
	raw, err := c.callRaw(ctx, s, w, protocol.MethodSendMessage, &w.send, o.Timeout)
	if err != nil {
		return nil, fmt.Errorf("sendMessage %q: %w", name, err)
	}
	// Read in place, as json.Unmarshal would decode it: the Stream has
	// checked the message, and reflection was a publisher's largest cost
	// after the socket (docs/BENCHMARKS.md, "Decisions").
	result, err := protocol.ScanSendMessageResult(raw)
	if err != nil {
		return nil, fmt.Errorf("sendMessage %q: decode result: %w", name, err)
	}
	return &result, nil
}

// sendRequest is sendMessage's params, which it writes by hand, payload
// and meta as they are: json.Marshal would compact them and escape <, >
// and &, and subscribers are promised the publisher's bytes.
type sendRequest struct {
	topic         string
	payload, meta []byte
}

// AppendParams appends the params to out.
func (r *sendRequest) AppendParams(out []byte) []byte {
	out = append(out, '{')
	if r.topic != "" {
		out = append(out, `"topic":`...)
		out = appendString(out, r.topic)
		out = append(out, ',')
	}
	out = append(out, `"payload":`...)
	out = append(out, r.payload...)
	if r.meta != nil {
		out = append(out, `,"meta":`...)
		out = append(out, r.meta...)
	}
	return append(out, '}')
}

// size is the length of the params AppendParams writes.
func (r *sendRequest) size() int {
	n := len(`{"payload":}`) + len(r.payload)
	if r.topic != "" {
		n += len(`"topic":,`) + stringSize(r.topic)
	}
	if r.meta != nil {
		n += len(`,"meta":`) + len(r.meta)
	}
	return n
}

// appendString appends s as a JSON string. Topics are plain ASCII in
// practice, which is copied between quotes without json.Marshal's
// allocations; anything else goes through encoding/json.
func appendString(out []byte, s string) []byte {
	if !plainString(s) {
		quoted, _ := json.Marshal(s) // a string always marshals
		return append(out, quoted...)
	}
	out = append(out, '"')
	out = append(out, s...)
	return append(out, '"')
}

// stringSize is len(appendString(nil, s)), without encoding a plain s.
func stringSize(s string) int {
	if !plainString(s) {
		return len(appendString(nil, s))
	}
	return len(s) + 2
}

// plainString reports whether s is printable ASCII with no quote or
// backslash, which JSON writes between quotes as it is.
func plainString(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// requestOverhead bounds what the JSON-RPC envelope adds to sendMessage's
// params: {"id":N,"jsonrpc":"2.0","method":"sendMessage","params":} with a
// 20-digit id is 76 bytes. Erring high only refuses a message within a few
// bytes of the limit, which the bus would refuse anyway next time.
const requestOverhead = 76

// encodeJSON returns v as JSON: raw JSON (json.RawMessage or []byte)
// byte for byte once checked, anything else marshalled.
func encodeJSON(v any) ([]byte, error) {
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
	if !jsonscan.Valid(raw) {
		return nil, errors.New("is not valid JSON")
	}
	if at := rpcstream.InvalidUTF8At(raw); at >= 0 {
		// The bus would close the connection with 1007.
		return nil, fmt.Errorf("is not valid UTF-8 at byte %d", at)
	}
	// Surrounding whitespace is not the value's, and the bus would count
	// it against the limit.
	return bytes.TrimSpace(raw), nil
}

// Ping asks the bus for its clock, which proves the connection works end
// to end.
func (c *Conn) Ping(ctx context.Context) (time.Time, error) {
	var result protocol.PingResult
	if err := c.call(ctx, protocol.MethodPing, json.RawMessage(`{}`), &result); err != nil {
		return time.Time{}, fmt.Errorf("ping: %w", err)
	}
	t, err := time.Parse(time.RFC3339, result.Timestamp)
	if err != nil {
		return time.Time{}, fmt.Errorf("ping: timestamp %q: %w", result.Timestamp, err)
	}
	return t, nil
}
