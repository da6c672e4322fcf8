package cluster_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/cluster"
)

// TestCompactRemovesOldDeleteMarkers checks that the acting node removes
// the marker an unsubscribe leaves in BUB_SUBS once it is older than
// MarkerAge, and leaves live subscriptions alone.
func TestCompactRemovesOldDeleteMarkers(t *testing.T) {
	port := bustest.FreePorts(t, 1)[0]
	n := startSolo(t, t.TempDir(), func(o *cluster.Options) {
		o.ClientListen = fmt.Sprintf("127.0.0.1:%d", port)
		o.CompactInterval = 100 * time.Millisecond
		o.MarkerAge = time.Millisecond
	})
	ctx, cancel := context.WithTimeout(t.Context(), bound)
	defer cancel()
	if _, err := n.PutSubscription(ctx, cluster.Subscription{Conn: 1, Pattern: "gone:*", ClientID: "x"}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.PutSubscription(ctx, cluster.Subscription{Conn: 1, Pattern: "kept:*", ClientID: "x"}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.DeleteSubscription(ctx, 1, "gone:*"); err != nil {
		t.Fatal(err)
	}

	nc, err := nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, "BUB_SUBS")
	if err != nil {
		t.Fatal(err)
	}
	gone := cluster.SubscriptionKey("solo", 1, "gone:*")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, err := kv.History(ctx, gone)
		assert.ErrorIs(c, err, jetstream.ErrKeyNotFound, "the delete marker of %s is still there", gone)
	}, bound, 50*time.Millisecond)
	if _, err := kv.Get(ctx, cluster.SubscriptionKey("solo", 1, "kept:*")); err != nil {
		t.Fatalf("a live subscription went with the markers: %v", err)
	}
}
