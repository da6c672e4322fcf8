package cluster

import (
	"context"
	"strings"
	"testing"
)

func TestOptionsRejected(t *testing.T) {
	for _, c := range []struct {
		name string
		opts Options
		want string
	}{
		{"no name", Options{NodeID: "a", URL: "nats://x"}, "Name is empty"},
		{"bad node id", Options{Name: "c", NodeID: "a.b", URL: "nats://x"}, `NodeID "a.b"`},
		{"empty node id", Options{Name: "c", URL: "nats://x"}, `NodeID ""`},
		// A longer one could not be named in a journal cursor.
		{"long node id", Options{Name: "c", NodeID: strings.Repeat("n", 129), URL: "nats://x"}, "1 to 128"},
		{"both", Options{Name: "c", NodeID: "a", URL: "nats://x", Routes: []string{"nats://y:1"}}, "exclude each other"},
		{"neither", Options{Name: "c", NodeID: "a"}, "neither URL"},
		{"no store", Options{Name: "c", NodeID: "a", ClusterListen: "127.0.0.1:0"}, "StoreDir"},
		{"replicas", Options{Name: "c", NodeID: "a", URL: "nats://x", Replicas: 7}, "Replicas 7"},
		{"timeouts", Options{Name: "c", NodeID: "a", URL: "nats://x", HeartbeatInterval: 5e9, NodeTimeout: 1e9}, "must exceed"},
	} {
		_, err := Start(context.Background(), &c.opts, Handler{ApplySubscription: func(SubscriptionChange) {}})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
	}
	opts := Options{Name: "c", NodeID: "a", URL: "nats://x"}
	if _, err := Start(context.Background(), &opts, Handler{}); err == nil || !strings.Contains(err.Error(), "ApplySubscription") {
		t.Errorf("no ApplySubscription: %v, want an error saying so", err)
	}
}

func TestSubscriptionKey(t *testing.T) {
	k := SubscriptionKey("node-1", 42, "order:*")
	node, conn, ok := parseSubscriptionKey(k)
	if !ok || node != "node-1" || conn != 42 {
		t.Errorf("key %q parsed to %q %d %v", k, node, conn, ok)
	}
	if SubscriptionKey("n", 1, "a*") == SubscriptionKey("n", 1, "a?") {
		t.Error("two patterns share a key")
	}
	if got := clientKey("a b/c.d"); strings.ContainsAny(got, " /.") {
		t.Errorf("client key %q holds characters a KV key may not", got)
	}
}
