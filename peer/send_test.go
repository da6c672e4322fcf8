package peer_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/peer"
	"github.com/bub-bus/bub/protocol"
)

// A message goes from one Go peer to another with its payload and meta
// byte for byte: key order, spacing, escapes (<, >, & and \u sequences)
// and numbers no float can hold, as docs/PROTOCOL.md promises; only the
// whitespace around the payload is dropped. The SDK used to re-encode
// both ways (keys sorted, <>& escaped).
func TestSendMessageRoundTrip(t *testing.T) {
	b := startBus(t, nil)
	sub := dial(t, b.URL, "sub", nil)
	pub := dial(t, b.URL, "pub", nil)

	got := make(chan *peer.Delivery, 1)
	require.NoError(t, sub.Subscribe(t.Context(), "inbound:*", func(_ context.Context, d *peer.Delivery) (peer.Result, error) {
		got <- d
		return peer.Result{Processed: true, Message: "seen " + d.Type()}, nil
	}, nil))

	payload := `{"zeta":1, "type":"plaintext_message","text":"hello","html":"<b>&amp;</b>","esc":"\u00e9\ud83d\ude00\u003c","big":123456789012345678901234567890,"exp":1.5e400,"nested":{"y":[3, 2,1],"x":null}}`
	meta := `{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","z":"<&>","a":18446744073709551616}`
	result, err := pub.SendMessage(t.Context(), "inbound:chat-1", json.RawMessage(" "+payload+"\n"), &peer.SendOptions{Meta: []byte(meta)})
	require.NoError(t, err)
	assert.True(t, result.Success)
	assert.NotEmpty(t, result.MessageID)
	assert.Equal(t, []protocol.Ack{{ClientID: "sub", Subscription: "inbound:*", Processed: true, Message: "seen plaintext_message"}}, result.Acks)

	d := <-got
	assert.Equal(t, "inbound:chat-1", d.Topic)
	assert.Equal(t, "inbound:*", d.Subscription)
	assert.Equal(t, "pub", d.From)
	assert.Equal(t, result.MessageID, d.MessageID)
	assert.Equal(t, 1, d.Attempt)
	assert.Equal(t, payload, string(d.Payload))
	assert.Equal(t, meta, string(d.Meta))
	var body struct{ Text string }
	require.NoError(t, d.Decode(&body))
	assert.Equal(t, "hello", body.Text)
}

func TestSendMessageNoSubscriberIsNotAnError(t *testing.T) {
	b := startBus(t, nil)
	pub := dial(t, b.URL, "pub", nil)
	result, err := pub.SendMessage(t.Context(), "nobody:home", msg("ping"), nil)
	require.NoError(t, err)
	assert.False(t, result.Success)
	assert.Equal(t, protocol.ReasonNoSubscribers, result.Reason)
	assert.True(t, result.NoSubscribers())
	assert.Empty(t, result.Acks)
}

func TestSendMessageDefaultTopic(t *testing.T) {
	b := startBus(t, nil)
	sub := dial(t, b.URL, "sub", nil)
	require.NoError(t, sub.Subscribe(t.Context(), "tg:42", processed, nil))
	pub := dial(t, b.URL, "pub", &peer.Options{DefaultTopic: "tg:42"})
	result, err := pub.SendMessage(t.Context(), "", msg("telegram_message"), nil)
	require.NoError(t, err)
	assert.True(t, result.Success)
}

// The bus's refusals come back as *protocol.Error with their code, and
// local checks that mirror them carry the same codes.
func TestErrorsCarryProtocolCodes(t *testing.T) {
	b := startBus(t, nil)
	c := dial(t, b.URL, "c", nil)
	ctx := t.Context()
	require.NoError(t, c.Subscribe(ctx, "dup", processed, nil))

	_, noType := c.SendMessage(ctx, "t", map[string]string{"text": "no type"}, nil)
	_, noTopic := c.SendMessage(ctx, "", msg("x"), nil)
	_, patternTopic := c.SendMessage(ctx, "a:*", msg("x"), nil)
	_, notObject := c.SendMessage(ctx, "t", json.RawMessage(`[1]`), nil)
	for _, tt := range []struct {
		name string
		err  error
		code int64
	}{
		{"payload without type", noType, protocol.CodeInvalidParams},
		{"no topic and no default", noTopic, protocol.CodeInvalidParams},
		{"pattern as topic", patternTopic, protocol.CodeInvalidParams},
		{"payload not an object", notObject, protocol.CodeInvalidParams},
		{"subscribe twice", c.Subscribe(ctx, "dup", processed, nil), protocol.CodeAlreadySubscribed},
		{"unsubscribe unknown", c.Unsubscribe(ctx, "never"), protocol.CodeSubscriptionNotFound},
		{"unknown policy", c.Subscribe(ctx, "p", processed, &peer.SubscribeOptions{Policy: "sometimes"}), protocol.CodeInvalidParams},
		{"bad pattern", c.Subscribe(ctx, "has space", processed, nil), protocol.CodeInvalidParams},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var perr *protocol.Error
			require.ErrorAs(t, tt.err, &perr)
			assert.Equal(t, tt.code, perr.Code, "%v", tt.err)
			assert.Equal(t, tt.code, protocol.CodeOf(tt.err))
		})
	}

	// A refused subscription leaves no handler behind: the pattern can be
	// subscribed properly afterwards.
	require.NoError(t, c.Subscribe(ctx, "p", processed, &peer.SubscribeOptions{Policy: protocol.PolicyContinueAll}))
}

func TestSendMessageRejectsBadJSONLocally(t *testing.T) {
	b := startBus(t, nil)
	c := dial(t, b.URL, "c", nil)
	_, err := c.SendMessage(t.Context(), "t", json.RawMessage(`{"type":`), nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not valid JSON")
	// The bus would close the connection with 1007 for it.
	_, err = c.SendMessage(t.Context(), "t", json.RawMessage(`{"type":"caf`+"\xe9"+`"}`), nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not valid UTF-8 at byte 12")
	_, err = c.SendMessage(t.Context(), "t", nil, nil)
	require.Error(t, err)
	_, err = c.SendMessage(t.Context(), "t", func() {}, nil)
	require.Error(t, err)
	var perr *protocol.Error
	assert.False(t, errors.As(err, &perr), "a local error is not the bus's")
}

func TestPing(t *testing.T) {
	b := startBus(t, nil)
	c := dial(t, b.URL, "c", nil)
	now, err := c.Ping(t.Context())
	require.NoError(t, err)
	assert.False(t, now.IsZero())
}

// A message over the bus's limit is refused before it is sent, with the
// size and the limit named; it used to cost the connection (a 1009 close)
// and say only "connection lost". The largest message the check lets
// through must be one the bus accepts.
func TestSendMessageRefusesOversized(t *testing.T) {
	b := startBus(t, &bus.Options{MaxMessageBytes: 1024, DeliveryTimeout: 2 * time.Second})
	sub := dial(t, b.URL, "sub", nil)
	require.NoError(t, sub.Subscribe(t.Context(), "big", func(context.Context, *peer.Delivery) (peer.Result, error) {
		return peer.Result{Processed: true}, nil
	}, nil))
	pub := dial(t, b.URL, "pub", &peer.Options{NoReconnect: true})
	assert.Equal(t, protocol.Limits{MaxMessageBytes: 1024, DeliveryTimeoutMs: 2000}, pub.Limits())

	payload := func(n int) json.RawMessage {
		return json.RawMessage(`{"type":"t","pad":"` + strings.Repeat("x", n) + `"}`)
	}
	// Grow the payload to the largest that passes the check: in steps
	// of 64 bytes to near the limit, then one byte at a time (a thousand
	// round trips took a second). Every size tried that passes must
	// reach the bus.
	n := 0
	for _, step := range []int{64, 1} {
		for {
			_, err := pub.SendMessage(t.Context(), "big", payload(n+step), nil)
			if errors.Is(err, peer.ErrMessageTooBig) {
				break
			}
			require.NoError(t, err, "a message the check passes must reach the bus (pad %d)", n+step)
			n += step
			if n > 1024 {
				t.Fatal("no message was refused")
			}
		}
	}
	_, err := pub.SendMessage(t.Context(), "big", payload(n+1), nil)
	require.ErrorIs(t, err, peer.ErrMessageTooBig)
	assert.Contains(t, err.Error(), "1025 bytes")
	assert.Contains(t, err.Error(), "limit of 1024 bytes")
	// Refused locally: the connection is still up.
	_, err = pub.Ping(t.Context())
	assert.NoError(t, err)
}
