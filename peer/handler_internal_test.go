package peer

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The bus does not relay should_retry in acks, so the wire form of a
// Result is checked here.
func TestResultWire(t *testing.T) {
	data, err := json.Marshal(Result{ShouldRetry: true, RetryAfter: 2500 * time.Millisecond, Message: "later", StopPropagation: true}.wire())
	require.NoError(t, err)
	assert.JSONEq(t, `{"processed":false,"should_retry":true,"retry_seconds":2.5,"message":"later","stopPropagation":true}`, string(data))
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
