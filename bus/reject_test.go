package bus_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/peer"
	"github.com/bub-bus/bub/protocol"
)

// subscribeAnswering connects a Go SDK peer as clientID, subscribed to
// pattern, that answers every delivery with r and counts them on seen.
func subscribeAnswering(t *testing.T, url, clientID, pattern string, r peer.Result, seen chan<- int) {
	t.Helper()
	c, err := peer.Dial(context.Background(), url, &peer.Options{ClientID: clientID, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	require.NoError(t, c.Subscribe(context.Background(), pattern, func(_ context.Context, d *peer.Delivery) (peer.Result, error) {
		seen <- d.Attempt
		return r, nil
	}, nil))
}

// checkRejected checks that the publish r was dead-lettered at its
// first attempt, with reason rejected and the subscriber's reason, as
// the dead letter ack names, and that no retry is left.
func checkRejected(t *testing.T, admin *bustest.Client, r protocol.SendMessageResult, clientID, why string) {
	t.Helper()
	require.Len(t, r.Acks, 1, "acks %+v", r.Acks)
	ack := r.Acks[0]
	assert.Equal(t, clientID, ack.ClientID)
	assert.False(t, ack.Processed)
	assert.False(t, ack.Retrying, "no retry for a refusal")
	require.NotEmpty(t, ack.DeadLetter, "the ack names the dead letter: %+v", ack)
	var d protocol.DeadLetter
	admin.MustCall(protocol.MethodDLQGet, protocol.DLQGetParams{ID: ack.DeadLetter}, &d)
	assert.Equal(t, protocol.ReasonRejected, d.Reason)
	assert.Equal(t, r.MessageID, d.MessageID)
	assert.Equal(t, clientID, d.ClientID)
	require.Len(t, d.Attempts, 1)
	assert.Equal(t, "rejected: "+why, d.Attempts[0].Error)
}

// TestRejectDeadLettersAtOnce: a subscriber refuses a message for good
// on its first attempt (reject: true, here through the Go SDK): the
// message is dead-lettered before sendMessage answers, with reason
// rejected and the subscriber's reason, and never delivered again.
// reject outweighs should_retry; processed outweighs reject; a message
// another subscriber handled is not dead-lettered.
func TestRejectDeadLettersAtOnce(t *testing.T) {
	const why = "chat not found"
	tests := []struct {
		name   string
		answer peer.Result
		// older, when set, is a second, older subscriber's answer.
		older    *peer.Result
		rejected bool
	}{
		{"reject", peer.Result{Reject: true, Message: why}, nil, true},
		{"reject outweighs should_retry", peer.Result{Reject: true, ShouldRetry: true, Message: why}, nil, true},
		{"reject with stopPropagation", peer.Result{Reject: true, StopPropagation: true, Message: why}, nil, true},
		{"processed outweighs reject", peer.Result{Processed: true, Reject: true, Message: why}, nil, false},
		{"handled by an older subscriber", peer.Result{Reject: true, Message: why}, &peer.Result{Processed: true}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := bustest.Start(t, fastRetries(5))
			admin := bustest.Connect(t, srv.URL, "ops", nil)
			seen := make(chan int, 8)
			if tt.older != nil {
				subscribeAnswering(t, srv.URL, "older", "out:*", *tt.older, make(chan int, 8))
			}
			subscribeAnswering(t, srv.URL, "bridge", "out:1", tt.answer, seen)
			r := admin.Publish("out:1", "reply")
			assert.Equal(t, 1, recv(t, seen))
			if tt.rejected {
				checkRejected(t, admin, r, "bridge", why)
			} else {
				for _, ack := range r.Acks {
					assert.Empty(t, ack.DeadLetter)
				}
				assert.Empty(t, dlqList(t, admin, protocol.DLQListParams{}).Entries)
			}
			assert.Equal(t, 0, pendingCount(t, srv))
			deliveries := series(t, srv.Registry(), "bub_deliveries_total")
			if tt.rejected {
				assert.Equal(t, float64(1), deliveries["outcome=rejected,"])
			}
		})
	}
}
