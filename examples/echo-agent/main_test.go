package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/internal/checkfor"
)

// TestEchoAgent runs the agent as a spawner would, from its environment,
// against a real bus.
func TestEchoAgent(t *testing.T) {
	b := bustest.Start(t, nil)
	ctx := context.Background()
	client, replies := bustest.Collect(t, b.URL, "tester", "outbound:*")

	t.Setenv("BUB_BUS_URL", b.URL)
	t.Setenv("BUB_AGENT_ID", "echo-1")
	t.Setenv("BUB_DEFAULT_TOPIC", "tg:99")
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- run(runCtx, slog.New(slog.DiscardHandler)) }()

	// The agent is up once its topic has a subscriber.
	checkfor.Check(t, 10*time.Second, func() error {
		res, err := client.SendMessage(ctx, "tg:99", map[string]any{"type": "plaintext_message", "text": "hi"}, nil)
		if err != nil || !res.Success {
			return fmt.Errorf("the agent never subscribed tg:99: %+v, %v", res, err)
		}
		if !res.Acks[0].Processed || res.Acks[0].ClientID != "echo-1" {
			t.Errorf("acks %+v", res.Acks)
		}
		return nil
	})

	tests := []struct {
		name    string
		topic   string
		payload string
		want    string // the reply: topic, then payload as the agent wrote it
	}{
		{"chat from the default topic", "", ``, `outbound:99 {"type":"plaintext_message","text":"echo: hi","chat_id":"99","agent_id":"echo-1"}`},
		{"numeric chat_id kept a number", "tg:99", `{"type":"telegram_message","text":"n","chat_id":5}`, `outbound:5 {"type":"plaintext_message","text":"echo: n","chat_id":5,"agent_id":"echo-1"}`},
		{"direct message", "agent:echo-1", `{"type":"telegram_message","text":"d","chat_id":"x"}`, `outbound:x {"type":"plaintext_message","text":"echo: d","chat_id":"x","agent_id":"echo-1"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.payload != "" {
				if res, err := client.SendMessage(ctx, tt.topic, json.RawMessage(tt.payload), nil); err != nil || !res.Success {
					t.Fatalf("send: %+v, %v", res, err)
				}
			}
			select {
			case d := <-replies:
				if got := d.Topic + " " + string(d.Payload); got != tt.want {
					t.Errorf("reply\n got %s\nwant %s", got, tt.want)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("no reply")
			}
		})
	}

	// Other types are left to other subscribers.
	res, err := client.SendMessage(ctx, "tg:99", map[string]any{"type": "task_request"}, nil)
	if err != nil || len(res.Acks) != 1 || res.Acks[0].Processed || !strings.Contains(res.Acks[0].Message, "task_request") {
		t.Errorf("task_request: %+v, %v", res, err)
	}

	stop()
	if err := <-done; err != nil {
		t.Errorf("run after cancel: %v", err)
	}
}

func TestEchoAgentNeedsItsTopic(t *testing.T) {
	t.Setenv("BUB_AGENT_ID", "echo-1")
	t.Setenv("BUB_DEFAULT_TOPIC", "")
	if err := run(context.Background(), slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "BUB_DEFAULT_TOPIC") {
		t.Errorf("run without a topic: %v", err)
	}
}
