package peer_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/peer"
)

// An agent subscribes to a topic pattern, a bridge publishes a message to
// it, and the bridge gets the agent's ack.
func Example() {
	ctx := context.Background()
	url, stop := startExampleBus()
	defer stop()

	agent, err := peer.Dial(ctx, url, &peer.Options{ClientID: "agent-1"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer agent.Close()
	err = agent.Subscribe(ctx, "tg:*", func(ctx context.Context, d *peer.Delivery) (peer.Result, error) {
		var msg struct{ Text string }
		if err := d.Decode(&msg); err != nil {
			return peer.Result{}, err
		}
		fmt.Printf("agent-1 got %s on %s from %s: %s\n", d.Type(), d.Topic, d.From, msg.Text)
		return peer.Result{Processed: true, Message: "on it"}, nil
	}, nil)
	if err != nil {
		fmt.Println(err)
		return
	}

	bridge, err := peer.Dial(ctx, url, &peer.Options{ClientID: "telegram"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer bridge.Close()
	result, err := bridge.SendMessage(ctx, "tg:42", map[string]string{"type": "telegram_message", "text": "hello"}, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, ack := range result.Acks {
		fmt.Printf("ack from %s: processed=%v %q\n", ack.ClientID, ack.Processed, ack.Message)
	}
	// Output:
	// agent-1 got telegram_message on tg:42 from telegram: hello
	// ack from agent-1: processed=true "on it"
}

// A message that no subscription matches is routed nowhere; that is a
// result, not an error. (A message to an absent agent, agent:*, would be
// held for it instead.)
func ExampleConn_SendMessage_noSubscribers() {
	ctx := context.Background()
	url, stop := startExampleBus()
	defer stop()

	c, err := peer.Dial(ctx, url, &peer.Options{ClientID: "tool"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	result, err := c.SendMessage(ctx, "tg:nobody", map[string]string{"type": "telegram_message"}, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	if result.NoSubscribers() {
		fmt.Println("nobody subscribes to tg:nobody:", result.Reason)
	}
	// Output:
	// nobody subscribes to tg:nobody: no_subscribers
}

// startExampleBus starts a bus in the process, as bub serve would run it,
// and returns its WebSocket URL and a function that stops it.
func startExampleBus() (url string, stop func()) {
	srv, _ := bus.New(&bus.Options{Logger: slog.New(slog.DiscardHandler)})
	hs := httptest.NewServer(srv)
	return "ws://" + strings.TrimPrefix(hs.URL, "http://") + "/", func() {
		srv.Shutdown(context.Background())
		hs.Close()
	}
}
