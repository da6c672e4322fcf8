package a2a_test

import (
	"context"
	"iter"
	"log/slog"
	"net/http/httptest"
	"slices"
	"strconv"
	"testing"
	"time"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"

	"github.com/bub-bus/bub/a2a"
	"github.com/bub-bus/bub/a2a/a2atest"
	"github.com/bub-bus/bub/peer"
)

// BenchmarkSendMessage measures a blocking SendMessage's round trip over
// loopback: HTTP to the A2A server, a publish through the bus to an
// agent that answers at once, its answer through the bus back into the
// task, on disk, and the answer to the client. docs/BENCHMARKS.md has
// the numbers beside BenchmarkSendMessageA2AGo's.
func BenchmarkSendMessage(b *testing.B) {
	f := start(b, a2a.Agent{Name: "w", Topic: "agent:w", ClientID: "a2a-gw"})
	conn, err := peer.Dial(b.Context(), f.bus.URL, &peer.Options{ClientID: "w", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	err = conn.Subscribe(b.Context(), "agent:w", func(ctx context.Context, d *peer.Delivery) (peer.Result, error) {
		var p a2a.Payload
		if err := d.Decode(&p); err != nil {
			return peer.Result{}, err
		}
		if _, err := d.Conn.SendMessage(ctx, p.ReplyTo, map[string]any{"type": "plaintext_message", "text": "ok"}, nil); err != nil {
			return peer.Result{}, err
		}
		return peer.Result{Processed: true}, nil
	}, nil)
	if err != nil {
		b.Fatal(err)
	}
	roundTrips(b, f.url("w"))
}

// BenchmarkSendMessageA2AGo is the same round trip through a2a-go's own
// server (a2asrv's JSON-RPC handler and its in-memory task store) with
// an echo executor in the same process: no bus, no second hop, nothing
// on disk. It is the baseline BenchmarkSendMessage is read against.
func BenchmarkSendMessageA2AGo(b *testing.B) {
	h := httptest.NewServer(a2asrv.NewJSONRPCHandler(a2asrv.NewHandler(echoExecutor{})))
	defer h.Close()
	roundTrips(b, h.URL)
}

// roundTrips sends b.N blocking SendMessages to url, one at a time, and
// reports their p50 and p99 beside the mean.
func roundTrips(b *testing.B, url string) {
	b.Helper()
	b.ReportAllocs()
	took := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		var sr spec.StreamResponse
		a2atest.Post(b, url, "SendMessage", a2atest.UserMessage("m-"+strconv.Itoa(i), "hi")).Decode(b, &sr)
		took = append(took, time.Since(t0))
		if task, ok := sr.Event.(*spec.Task); !ok || task.Status.State != spec.TaskStateCompleted {
			b.Fatalf("answer %#v, want a completed task", sr.Event)
		}
	}
	b.StopTimer()
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(took[len(took)*99/100].Microseconds()), "p99-µs")
}

// echoExecutor is a2a-go's agent side of BenchmarkSendMessageA2AGo:
// the task, submitted, then completed with the agent's "ok", as the
// bus's agent makes it.
type echoExecutor struct{}

func (echoExecutor) Execute(_ context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[spec.Event, error] {
	return func(yield func(spec.Event, error) bool) {
		if ec.StoredTask == nil && !yield(spec.NewSubmittedTask(ec, ec.Message), nil) {
			return
		}
		yield(spec.NewStatusUpdateEvent(ec, spec.TaskStateCompleted, spec.NewMessageForTask(spec.MessageRoleAgent, ec, spec.NewTextPart("ok"))), nil)
	}
}

func (echoExecutor) Cancel(_ context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[spec.Event, error] {
	return func(yield func(spec.Event, error) bool) {
		yield(spec.NewStatusUpdateEvent(ec, spec.TaskStateCanceled, nil), nil)
	}
}
