package bus_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/protocol"
)

// A batch of sendMessages read together is relayed on the read loop and
// reaches its subscriber in one write call, which leaves once the batch
// is handled (direct.go, outbound.Batch); every publish gets its result.
// The batch is one JSON-RPC batch, so it is one read however the machine
// schedules, and it is read once the publisher's initialize has left the
// in-order goroutine, which would otherwise handle it. Once in a few
// hundred runs under -race a batch took two write calls (cause not
// found: something else written to the subscriber between the
// snapshots); a batching that is gone takes n every time, so the test
// asks for one batch in three to leave in one write.
func TestRelayBatchLeavesInOneWrite(t *testing.T) {
	const n = 20
	srv := bustest.Start(t, &bus.Options{MaxInFlight: n})
	bustest.Connect(t, srv.URL, "sub", bustest.Processed).Subscribe("batch", "")
	pub := connectPublisher(t, srv, "pub")
	var counts []uint64
	for range 3 {
		writes0, frames0 := bus.ClientConn(srv.Server, "sub").WriteStats()
		for i, r := range publishBatch(t, pub, "batch", n, true) {
			require.True(t, r.Success, "publish %d", i)
			require.True(t, r.Acks[0].Processed, "publish %d", i)
		}
		writes, frames := bus.ClientConn(srv.Server, "sub").WriteStats()
		require.Equal(t, uint64(n), frames-frames0, "processMessage frames to the subscriber")
		if writes-writes0 == 1 {
			return
		}
		counts = append(counts, writes-writes0)
	}
	t.Fatalf("write calls to the subscriber for one batch read: %v in three batches; want 1", counts)
}

// relayPaths are the ways a sendMessage to one subscriber connection is
// made: its walk started on the read loops (direct.go), or on a goroutine
// of its own, which a message with an idempotency key takes, each writing
// its call itself (walk.go); and through the delivery pipeline, which a
// walk takes for a delivery that may wait (ViaPipeline). The tests below
// run on all three, so they are held to the same behaviour.
var relayPaths = []struct {
	name     string
	direct   bool
	pipeline bool
}{{"read loops", true, false}, {"goroutine", false, false}, {"pipeline", false, true}}

// batchKeys numbers the idempotency keys of publishBatch, so no two
// messages share one.
var batchKeys atomic.Int64

// connectPublisher connects clientID, which only publishes, and waits
// until its next request is handled on its read loop (WaitInOrder).
func connectPublisher(t *testing.T, srv *bustest.Server, clientID string) *bustest.Client {
	t.Helper()
	pub := bustest.Connect(t, srv.URL, clientID, nil)
	bus.ClientConn(srv.Server, clientID).WaitInOrder()
	return pub
}

// publishBatch sends n sendMessages of one subscriber's topic in one
// JSON-RPC batch, which the bus reads at once, and returns their results
// in the order sent. Unless direct, each carries an idempotency key of
// its own, which sends it through the chain.
func publishBatch(t *testing.T, pub *bustest.Client, topic string, n int, direct bool) []protocol.SendMessageResult {
	t.Helper()
	reqs := make([]string, n)
	for i := range reqs {
		meta := ""
		if !direct {
			meta = fmt.Sprintf(`,"meta":{"idempotency_key":"k-%d"}`, batchKeys.Add(1))
		}
		reqs[i] = fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"sendMessage","params":{"topic":%q,"payload":{"type":"t"}%s}}`, i, topic, meta)
	}
	pub.Send("[" + strings.Join(reqs, ",") + "]")
	answers := pub.RecvBatch()
	require.Len(t, answers, n)
	results := make([]protocol.SendMessageResult, n)
	for _, a := range answers {
		id, err := strconv.Atoi(string(a.ID))
		require.NoError(t, err, "id %s", a.ID)
		require.Nil(t, a.Error, "publish %d", id)
		require.NoError(t, json.Unmarshal(a.Result, &results[id]), "publish %d", id)
		require.Len(t, results[id].Acks, 1, "publish %d", id)
	}
	return results
}

// pathOptions returns o, with its walks' deliveries made through the
// delivery pipeline when pipeline is set (relayPaths).
func pathOptions(pipeline bool, o *bus.Options) *bus.Options {
	if pipeline {
		return bus.ViaPipeline(o)
	}
	return o
}

// startSilent starts a bus whose deliveries time out after timeout, whose
// retries wait an hour, and which takes n requests at once from a
// connection and has a subscriber turn slow after slowAfter timeouts
// (Limits.SlowSubscriberTimeouts), its walks' deliveries made through the
// pipeline when pipeline is set; it connects a subscriber of "work",
// sub, which reads its deliveries and answers none until told to, and a
// publisher, pub.
func startSilent(t *testing.T, timeout time.Duration, n, slowAfter int, pipeline bool) (srv *bustest.Server, sub *bustest.Client, subConn *bus.Conn, pub *bustest.Client) {
	t.Helper()
	srv = bustest.Start(t, pathOptions(pipeline, &bus.Options{DeliveryTimeout: timeout, MaxInFlight: n,
		RetryBaseDelay: time.Hour, RetryDelayCap: time.Hour, Limits: bus.Limits{SlowSubscriberTimeouts: slowAfter}}))
	sub = bustest.Dial(t, srv.URL)
	sub.Initialize("sub")
	sub.Subscribe("work", "")
	return srv, sub, bus.ClientConn(srv.Server, "sub"), connectPublisher(t, srv, "pub")
}

// TestRelayTimeout: a delivery its subscriber does not answer within
// DeliveryTimeout fails with timeout and is retried, on every relay path
// (relayPaths): the walk's timer bounds the calls it writes, the chain's
// context the pipeline's. Each gives back
// the publisher's slot and the subscriber's count of deliveries in
// flight: a second round finds every slot free.
func TestRelayTimeout(t *testing.T) {
	for _, path := range relayPaths {
		t.Run(path.name, func(t *testing.T) {
			t.Parallel()
			const n = 3
			// Every delivery times out: a short timeout is safe.
			srv, sub, subConn, pub := startSilent(t, 100*time.Millisecond, n, -1, path.pipeline)

			for round := range 2 {
				writes0, _ := subConn.WriteStats()
				for i, r := range publishBatch(t, pub, "work", n, path.direct) {
					require.Contains(t, r.Acks[0].Error, "timeout: no answer within 100ms", "round %d publish %d", round, i)
					require.True(t, r.Acks[0].Retrying, "round %d publish %d", round, i)
				}
				for range n {
					sub.Recv()
				}
				if path.direct {
					writes, _ := subConn.WriteStats()
					require.Equal(t, uint64(1), writes-writes0, "the batch's calls leave in one write: relayed on the read loops")
				}
				require.Zero(t, subConn.DeliveriesInFlight(), "round %d", round)
			}
			require.Equal(t, float64(2*n), metric(t, srv, "bub_deliveries_total", "timeout"))
		})
	}
}

// TestRelaySlowSubscriber: once a subscriber has left
// SlowSubscriberTimeouts deliveries unanswered, its next ones are refused
// without being sent and retried, on every relay path; a late answer ends
// that, and the next deliveries are made and processed.
func TestRelaySlowSubscriber(t *testing.T) {
	for _, path := range relayPaths {
		t.Run(path.name, func(t *testing.T) {
			t.Parallel()
			const n = 2
			// Long enough for the deliveries answered at the end on a
			// loaded machine.
			srv, sub, subConn, pub := startSilent(t, time.Second, n, n, path.pipeline)

			for _, r := range publishBatch(t, pub, "work", n, path.direct) {
				require.Contains(t, r.Acks[0].Error, "timeout")
			}
			var late []json.RawMessage
			for range n {
				late = append(late, sub.Recv())
			}
			require.Equal(t, 1.0, metric(t, srv, "bub_slow_subscribers", ""))

			_, frames0 := subConn.WriteStats()
			for i, r := range publishBatch(t, pub, "work", n, path.direct) {
				require.Contains(t, r.Acks[0].Error, `slow_subscriber: not sent: client "sub" left its last 2 deliveries unanswered`, "publish %d", i)
				require.True(t, r.Acks[0].Retrying, "publish %d", i)
			}
			_, frames := subConn.WriteStats()
			require.Equal(t, frames0, frames, "a refused delivery is not sent")
			require.Equal(t, float64(n), refusals(t, srv, "slow_subscriber_timeouts"))
			require.Equal(t, float64(n), metric(t, srv, "bub_deliveries_total", "slow_subscriber"))
			require.Zero(t, subConn.DeliveriesInFlight())

			answerLate(t, sub, late[0])
			sub.OnProcess(bustest.Processed)
			for i, r := range publishBatch(t, pub, "work", n, path.direct) {
				require.True(t, r.Acks[0].Processed, "publish %d: %+v", i, r.Acks[0])
			}
			require.Equal(t, 0.0, metric(t, srv, "bub_slow_subscribers", ""))
			require.Zero(t, subConn.DeliveriesInFlight())
		})
	}
}

// TestRelayPanic: a panic in a delivery layer, before the call or after
// the answer, is the delivery's failure and is retried, on every relay
// path: the publisher gets its result, its slot back
// (MaxInFlight 1, and the second publish is taken), the subscriber's
// count of deliveries in flight goes back to 0, and the bus shuts down
// without waiting on a request. Before the relay recovered it, the panic
// after the answer ended the process, on the subscriber's read loop.
func TestRelayPanic(t *testing.T) {
	for _, after := range []bool{false, true} {
		for _, path := range relayPaths {
			t.Run(fmt.Sprintf("%s/after=%t", path.name, after), func(t *testing.T) {
				bus.PanicInDeliveries(t, "sub", after)
				srv := bustest.Start(t, pathOptions(path.pipeline, &bus.Options{MaxInFlight: 1, RetryBaseDelay: time.Hour, RetryDelayCap: time.Hour}))
				bustest.Connect(t, srv.URL, "sub", bustest.Processed).Subscribe("work", "")
				subConn := bus.ClientConn(srv.Server, "sub")
				_, frames0 := subConn.WriteStats()
				pub := connectPublisher(t, srv, "pub")

				for i := range 2 {
					r := publishBatch(t, pub, "work", 1, path.direct)[0]
					require.Equal(t, "error: the delivery failed inside the bus; its log has the details", r.Acks[0].Error, "publish %d", i)
					require.True(t, r.Acks[0].Retrying, "publish %d", i)
				}
				_, frames := subConn.WriteStats()
				if after {
					require.Equal(t, uint64(2), frames-frames0, "the calls were made")
				} else {
					require.Equal(t, frames0, frames, "no call is made")
				}
				require.Equal(t, 2.0, series(t, srv.Registry(), "bub_panics_total")["where=request,"])
				require.Zero(t, subConn.DeliveriesInFlight())
				ctx, cancel := context.WithTimeout(t.Context(), bustest.Timeout)
				defer cancel()
				require.NoError(t, srv.Shutdown(ctx), "a request left running")
			})
		}
	}
}
