package mcp_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bub-bus/bub/bridges/mcp"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/peer"
)

// connect runs an MCP server on a bus connection as clientID and
// connects the SDK's client to it in memory.
func connect(t *testing.T, url, clientID string, opts *mcp.Options) *sdk.ClientSession {
	t.Helper()
	ctx := context.Background()
	conn, err := peer.Dial(ctx, url, &peer.Options{ClientID: clientID, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	clientT, serverT := sdk.NewInMemoryTransports()
	if opts == nil {
		opts = &mcp.Options{}
	}
	opts.Logger = slog.New(slog.DiscardHandler)
	ss, err := mcp.NewServer(conn, opts).Connect(ctx, serverT, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close(); ss.Wait() })
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, clientT, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// waited is wait_for_message's structured result, as far as the tests
// read it.
type waited struct {
	Received bool  `json:"received"`
	Missed   int64 `json:"missed"`
	Message  struct {
		Seq       int64 `json:"seq"`
		Untrusted struct {
			Payload map[string]any `json:"payload"`
		} `json:"untrusted"`
	} `json:"message"`
}

func call(t *testing.T, cs *sdk.ClientSession, name string, args map[string]any, out any) {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil || res.IsError {
		t.Fatalf("%s: %v %v", name, err, res)
	}
	data, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(data, out); err != nil {
		t.Fatalf("%s: %s: %v", name, data, err)
	}
}

// TestWatchKeepsHistoryAndPassesOn: a watched pattern does not take
// messages from older subscriptions of other patterns (continueAll; an
// identical pattern string would replace the older one, docs/PROTOCOL.md);
// messages between calls wait in the log, oldest first; one pushed out of
// the log unread is counted as missed.
func TestWatchKeepsHistoryAndPassesOn(t *testing.T) {
	srv := bustest.Start(t, nil)
	_, worker := bustest.Collect(t, srv.URL, "worker", "jobs:")
	cs := connect(t, srv.URL, "assistant", &mcp.Options{History: 2})
	// Reading the resource watches the pattern.
	if _, err := cs.ReadResource(t.Context(), &sdk.ReadResourceParams{URI: "bub://topic/jobs:*"}); err != nil {
		t.Fatal(err)
	}
	pub, err := peer.Dial(t.Context(), srv.URL, &peer.Options{ClientID: "pub", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	for i := 1; i <= 3; i++ {
		res, err := pub.SendMessage(t.Context(), "jobs:1", map[string]any{"type": "job", "n": i}, nil)
		if err != nil || len(res.Acks) != 2 || !res.Acks[0].Processed || !res.Acks[1].Processed {
			t.Fatalf("publish %d: %+v, %v; want the assistant's and the worker's acks", i, res, err)
		}
		<-worker
	}
	for _, want := range []struct{ seq, missed, n int64 }{{2, 1, 2}, {3, 0, 3}} {
		var got waited
		call(t, cs, "wait_for_message", map[string]any{"pattern": "jobs:*", "timeout_seconds": 10}, &got)
		if !got.Received || got.Message.Seq != want.seq || got.Missed != want.missed || got.Message.Untrusted.Payload["n"] != float64(want.n) {
			t.Errorf("wait_for_message: %+v, want seq %d, missed %d, n %d", got, want.seq, want.missed, want.n)
		}
	}
}
