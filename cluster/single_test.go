package cluster_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/bub-bus/bub/cluster"
)

// TestOneNode runs a node alone, on an embedded server without routes
// and on an external NATS server given by URL: JetStream standalone, one
// replica, and the same primitives.
func TestOneNode(t *testing.T) {
	external := func(t *testing.T) *cluster.Options {
		s, err := server.NewServer(&server.Options{
			Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true,
			StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
			// Room for the bus's largest message in a record.
			MaxPayload: 2 << 20,
		})
		if err != nil {
			t.Fatal(err)
		}
		s.Start()
		t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
		if !s.ReadyForConnections(bound) {
			t.Fatal("external NATS server not ready")
		}
		return &cluster.Options{URL: s.ClientURL()}
	}
	embedded := func(t *testing.T) *cluster.Options {
		return &cluster.Options{ClusterListen: "127.0.0.1:0", StoreDir: t.TempDir()}
	}
	for name, setup := range map[string]func(*testing.T) *cluster.Options{"external": external, "embedded": embedded} {
		t.Run(name, func(t *testing.T) {
			rec := &recorder{}
			opts := setup(t)
			opts.Name, opts.NodeID = "solo", "only"
			opts.HeartbeatInterval, opts.NodeTimeout = testHeartbeat, testNodeTimeout
			opts.StartTimeout = bound
			opts.Logger = testLogger()
			n, err := cluster.Start(t.Context(), opts, cluster.Handler{ApplySubscription: rec.apply, Deliver: echo("only")})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), bound)
			defer cancel()
			if n.Replicas() != 1 || !slices.Equal(n.Live(), []string{"only"}) || !n.Acting() {
				t.Errorf("replicas %d, live %v, acting %v", n.Replicas(), n.Live(), n.Acting())
			}
			rev, err := n.PutSubscription(ctx, cluster.Subscription{Conn: 1, Pattern: "*", ClientID: "x"})
			if err != nil {
				t.Fatal(err)
			}
			if err := n.Sync(ctx, rev); err != nil {
				t.Fatal(err)
			}
			if !rec.sawRevision(rev) {
				t.Error("Sync returned before the node applied its own subscription")
			}
			got, err := n.Deliver(ctx, "only", &cluster.Delivery{ClientID: "x", Conn: 1, Pattern: "*", Attempt: 1, Payload: []byte("hi")})
			if err != nil || string(got) != "only got x/1/*/1: hi" {
				t.Errorf("deliver to itself: %q, %v", got, err)
			}
			closeCtx, cancelClose := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancelClose()
			if err := n.Close(closeCtx); err != nil {
				t.Fatal(err)
			}
			if _, err := n.PutSubscription(ctx, cluster.Subscription{Conn: 1, Pattern: "*"}); err == nil {
				t.Error("put after Close succeeded")
			}
		})
	}
}
