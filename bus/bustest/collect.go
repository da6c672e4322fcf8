package bustest

import (
	"context"
	"log/slog"
	"testing"

	"github.com/bub-bus/bub/peer"
)

// Collect connects a Go SDK peer as clientID, subscribes it to pattern,
// and returns the peer (to publish with) and the deliveries it receives;
// each is answered processed: true with the message "ok". The peer closes
// when the test ends.
func Collect(t testing.TB, url, clientID, pattern string) (*peer.Conn, <-chan *peer.Delivery) {
	t.Helper()
	c, err := peer.Dial(context.Background(), url, &peer.Options{ClientID: clientID, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("bustest: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	got := make(chan *peer.Delivery, 64)
	err = c.Subscribe(context.Background(), pattern, func(_ context.Context, d *peer.Delivery) (peer.Result, error) {
		got <- d
		return peer.Result{Processed: true, Message: "ok"}, nil
	}, nil)
	if err != nil {
		t.Fatalf("bustest: subscribe %s: %v", pattern, err)
	}
	return c, got
}
