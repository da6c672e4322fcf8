package peer

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/protocol"
)

// The bus does not relay should_retry in acks, so the wire form of a
// Result is checked here.
func TestResultWire(t *testing.T) {
	data, err := json.Marshal(Result{ShouldRetry: true, RetryAfter: 2500 * time.Millisecond, Message: "later", StopPropagation: true}.wire())
	require.NoError(t, err)
	assert.JSONEq(t, `{"processed":false,"should_retry":true,"retry_seconds":2.5,"message":"later","stopPropagation":true}`, string(data))
	data, err = json.Marshal(Result{Reject: true, Message: "never"}.wire())
	require.NoError(t, err)
	assert.JSONEq(t, `{"processed":false,"should_retry":false,"retry_seconds":0,"reject":true,"message":"never","stopPropagation":false}`, string(data))
}

func TestBackoffIsCappedWithJitter(t *testing.T) {
	c := &Conn{opts: Options{ReconnectMin: 100 * time.Millisecond, ReconnectMax: time.Second}}
	for n, ceiling := range []time.Duration{100, 200, 400, 800, 1000, 1000} {
		ceiling *= time.Millisecond
		for range 50 {
			d := c.backoff(n)
			assert.GreaterOrEqual(t, d, ceiling/2, "attempt %d", n)
			assert.LessOrEqual(t, d, ceiling, "attempt %d", n)
		}
	}
	assert.LessOrEqual(t, c.backoff(1000), time.Second, "no overflow on a long outage")
}

// A handler's default deadline falls before the bus's delivery timeout, so
// its answer arrives while the bus still waits, and the bus does not send
// the message again to a handler that is still running.
func TestHandlerBudgetBelowDeliveryTimeout(t *testing.T) {
	for _, tt := range []struct {
		deliveryMs int64
		want       time.Duration
	}{
		{30_000, 29 * time.Second},
		{1_000, 900 * time.Millisecond},
		{100, 90 * time.Millisecond},
		{300_000, 299 * time.Second},
		{0, 29 * time.Second}, // a bus that does not say: its default, 30s
	} {
		assert.Equal(t, tt.want, handlerBudget(protocol.Limits{DeliveryTimeoutMs: tt.deliveryMs}), "delivery timeout %dms", tt.deliveryMs)
	}
}

// TestResultAppendWire: the answer a handler's Result is sent as is the bytes
// json.Marshal writes for its wire form (but for the escaping of <, > and
// &, which decodes the same).
func TestResultAppendWire(t *testing.T) {
	for _, r := range []Result{
		{},
		{Processed: true},
		{Processed: true, StopPropagation: true, Message: "done"},
		{ShouldRetry: true, RetryAfter: time.Hour},
		{ShouldRetry: true, RetryAfter: 1500 * time.Millisecond, Message: `say "hi" \ é 😀 ` + "\x01\n"},
		{ShouldRetry: true, RetryAfter: time.Nanosecond},
		{ShouldRetry: true, RetryAfter: -2 * time.Second},
		{Reject: true, Message: "blocked"},
		{Reject: true, Message: "<b>&</b>"},
	} {
		got := r.appendWire(nil)
		want, err := json.Marshal(r.wire())
		require.NoError(t, err)
		var g, w protocol.ProcessMessageResult
		require.NoError(t, json.Unmarshal(got, &g), "%s", got)
		require.NoError(t, json.Unmarshal(want, &w))
		assert.Equal(t, w, g)
		if !strings.ContainsAny(r.Message, "<>&") {
			assert.Equal(t, string(want), string(got))
		}
	}
}

// TestSendRequestSize: the size a send is checked against the bus's
// limit with is the length of the params it writes.
func TestSendRequestSize(t *testing.T) {
	for _, r := range []sendRequest{
		{payload: []byte(`{"type":"t"}`)},
		{topic: "agent:bob", payload: []byte(`{"type":"t"}`), meta: []byte(`{"traceparent":"00"}`)},
		{topic: `a "quoted" ü topic` + "\x01", payload: []byte(`{"type":"t","x":"<&>"}`)},
		{topic: "t", payload: []byte(`{"type":"t"}`), meta: []byte(`{}`)},
	} {
		params := r.AppendParams(nil)
		assert.Equal(t, len(params), r.size(), "%s", params)
		assert.True(t, json.Valid(params), "%s", params)
	}
}
