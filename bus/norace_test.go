//go:build !race

// Tests that measure the process's heap: they would measure the race
// detector's and every other test's allocations too under make test's
// -race, so they are built without it and run alone, as nats-server's
// norace tests are (make test runs go test -run '^TestNoRace').

package bus_test

import (
	"encoding/json"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/protocol"
)

// TestNoRaceFanOutHoldsNoCopyPerWaitingSubscriber: a continueAll fan-out sends
// to every subscriber at once, and while they take their time to answer
// the bus keeps the payload once for the walk, not once per subscriber
// still to answer (100 subscribers of a 200 KiB message held 20 MiB before
// deliveries encoded into the frame buffer).
func TestNoRaceFanOutHoldsNoCopyPerWaitingSubscriber(t *testing.T) {
	const subscribers, size = 100, 200 << 10
	srv := bustest.Start(t, &bus.Options{DeliveryTimeout: time.Minute})
	invoked, release := waitingSubscribers(t, srv.URL, subscribers, protocol.ProcessMessageResult{})
	pub := bustest.Connect(t, srv.URL, "pub", nil)
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	before := ms.HeapAlloc
	// Sent raw and its answer read with Recv, not with Call, whose one
	// bound of bustest.Timeout would cover the whole fan-out: 100
	// deliveries of 200 KiB that this test's clients decode take 3-9 s
	// under -race on a loaded 2-core box, arriving steadily. Every wait
	// below is bounded by the progress it waits for instead: each
	// invocation, then the result once the subscribers are released.
	request, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": "fan", "method": protocol.MethodSendMessage,
		"params": map[string]any{"topic": "fanout", "payload": map[string]any{"type": "t", "blob": strings.Repeat("x", size)}}})
	require.NoError(t, err)
	pub.Send(string(request))
	awaitInvoked(t, invoked, subscribers)
	runtime.GC()
	runtime.ReadMemStats(&ms)
	grown := int64(ms.HeapAlloc) - int64(before)
	close(release)
	r := pub.RecvResponse()
	require.Nil(t, r.Error)
	require.JSONEq(t, `"fan"`, string(r.ID))
	// A few copies in flight are fine (the walk's own, frames being
	// written); one per waiting subscriber is not.
	if limit := int64(subscribers/5) * size; grown > limit {
		t.Errorf("heap grew by %d MiB while 100 subscribers had the message, want under %d MiB", grown>>20, limit>>20)
	}
}
