package bus_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/protocol"
)

// TestPanicHoldingLockDoesNotDeadlock: a panic inside initialize's
// section, which holds the bus's global lock and the connection's, is
// answered with -32603, and the bus goes on: the same connection answers
// ping's "call initialize first", and other clients initialize,
// subscribe and publish. Before the section released its locks by defer
// the next initialize waited forever.
func TestPanicHoldingLockDoesNotDeadlock(t *testing.T) {
	bus.PanicInInitialize(t, "boom")
	srv := bustest.Start(t, nil)

	c := bustest.Dial(t, srv.URL)
	r := c.Call(protocol.MethodInitialize, protocol.InitializeParams{ClientID: "boom"})
	require.NotNil(t, r.Error)
	assert.EqualValues(t, protocol.CodeInternalError, r.Error.Code)
	assert.EqualValues(t, protocol.CodeNotInitialized, code(c.Call(protocol.MethodPing, map[string]any{})))

	sub := bustest.Connect(t, srv.URL, "worker", bustest.Processed)
	sub.Subscribe("jobs:*", "")
	pub := bustest.Connect(t, srv.URL, "pub", nil)
	res := pub.Publish("jobs:1", "job")
	require.Len(t, res.Acks, 1)
	assert.True(t, res.Acks[0].Processed)
	assert.Equal(t, float64(1), series(t, srv.Registry(), "bub_panics_total")["where=request,"])
}
