package a2a_test

import (
	"context"
	"log/slog"
	"strconv"
	"testing"

	spec "github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/bub-bus/bub/a2a"
	"github.com/bub-bus/bub/a2a/a2atest"
	"github.com/bub-bus/bub/peer"
)

// BenchmarkSendMessage measures a blocking SendMessage's round trip over
// loopback: HTTP to the A2A server, a publish through the bus to an
// agent that answers at once, its answer through the bus back into the
// task, on disk, and the answer to the client.
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
	b.ResetTimer()
	for i := range b.N {
		var sr spec.StreamResponse
		a2atest.Post(b, f.url("w"), "SendMessage", a2atest.UserMessage("m-"+strconv.Itoa(i), "hi")).Decode(b, &sr)
		if task := sr.Event.(*spec.Task); task.Status.State != spec.TaskStateCompleted {
			b.Fatalf("task %s", task.Status.State)
		}
	}
}
