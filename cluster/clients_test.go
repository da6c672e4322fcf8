package cluster_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/cluster"
	"github.com/bub-bus/bub/cluster/clustertest"
)

// TestClaimRemovedIsNotATakeover: a claim deleted by someone else (a
// node that presumed this one dead removes its claims) ends the claim
// through ClaimRemoved, so the bus can have the client reconnect; only
// a put by another connection is a takeover, which the client takes as
// final.
func TestClaimRemovedIsNotATakeover(t *testing.T) {
	var mu sync.Mutex
	var removed, takenOver []string
	port := clustertest.FreePorts(t, 1)[0]
	o := soloOptions(t.TempDir())
	o.ClientListen = fmt.Sprintf("127.0.0.1:%d", port)
	n, err := cluster.Start(t.Context(), o, cluster.Handler{
		ApplySubscription: func(cluster.SubscriptionChange) {},
		TakenOver: func(clientID string, conn uint64) {
			mu.Lock()
			defer mu.Unlock()
			takenOver = append(takenOver, fmt.Sprintf("%s/%d", clientID, conn))
		},
		ClaimRemoved: func(clientID string, conn uint64) {
			mu.Lock()
			defer mu.Unlock()
			removed = append(removed, fmt.Sprintf("%s/%d", clientID, conn))
		},
	})
	require.NoError(t, err)
	t.Cleanup(func() { closeNode(n) })
	ctx, cancel := context.WithTimeout(t.Context(), bound)
	defer cancel()

	_, err = n.ClaimClient(ctx, "agent:one", 7)
	require.NoError(t, err)
	_, err = n.ClaimClient(ctx, "agent:two", 8)
	require.NoError(t, err)

	nc, err := nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", port))
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	kv, err := js.KeyValue(ctx, "BUB_CLIENTS")
	require.NoError(t, err)
	key := func(id string) string { return base64.RawURLEncoding.EncodeToString([]byte(id)) }

	// What removeDeadNode does on another node.
	require.NoError(t, kv.Delete(ctx, key("agent:one")))
	// What a connection on another node does.
	_, err = kv.Put(ctx, key("agent:two"), []byte(`{"node":"other","conn":99}`))
	require.NoError(t, err)

	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(removed)+len(takenOver) == 2
	}, bound, 10*time.Millisecond, "the node hears both changes")
	mu.Lock()
	defer mu.Unlock()
	require.True(t, slices.Equal(removed, []string{"agent:one/7"}), "removed: %v", removed)
	require.True(t, slices.Equal(takenOver, []string{"agent:two/8"}), "taken over: %v", takenOver)
}
