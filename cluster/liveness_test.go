package cluster_test

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/cluster"
)

// holds reports whether r's order holds key at revision rev.
func holds(r *recorder, key string, rev uint64) bool {
	return slices.ContainsFunc(r.active(), func(c cluster.SubscriptionChange) bool { return c.Key == key && c.Revision == rev })
}

// TestNewRun: a node presumed dead that starts again before the acting
// node has removed its keys keeps what its new run wrote: a client that
// came back to it keeps its claim and its subscription, and the node
// its registration. The acting node removes only the keys of the run it
// presumed dead; it used to remove the new run's too, and the client's
// connection was closed with 1013 (try again later) for nothing.
func TestNewRun(t *testing.T) {
	reached, release, removed := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var holdOnce, removedOnce sync.Once
	ids := []string{"a", "b", "c"}
	nodes, recs, opts := startClusterWith(t, ids, nil, func(id string, o *cluster.Options) {
		if id != "a" {
			return
		}
		// a, the acting node, is held before its first try to remove
		// b's keys, until b's new run has written its own; removed is
		// closed once a try succeeds.
		cluster.OnRemoving(o, func(peer string) func(error) {
			if peer != "b" {
				return func(error) {}
			}
			holdOnce.Do(func() {
				close(reached)
				<-release
			})
			return func(err error) {
				if err != nil {
					t.Logf("a's try to remove b's keys failed: %v", err)
					return
				}
				removedOnce.Do(func() { close(removed) })
			}
		})
	})
	a, b := nodes[0], nodes[1]
	ctx := t.Context()
	key := cluster.SubscriptionKey("b", 1, "run:*")
	put := func(n *cluster.Node) uint64 {
		t.Helper()
		_, err := n.ClaimClient(ctx, "x", 1)
		require.NoError(t, err)
		rev, err := n.PutSubscription(ctx, cluster.Subscription{Conn: 1, Pattern: "run:*", ClientID: "x"})
		require.NoError(t, err)
		require.NoError(t, n.Sync(ctx, rev))
		return rev
	}
	put(b)

	b.Crash()
	select {
	case <-reached:
	case <-time.After(bound):
		t.Fatal("a never set about removing the keys of b, presumed dead")
	}
	rec := &recorder{}
	b, err := cluster.Start(ctx, opts[1], rec.handler(cluster.Handler{}))
	require.NoError(t, err)
	nodes[1] = b // closed with the others
	// The client comes back to b's new run: the same clientId and
	// connection id, hence the same subscription key as before.
	rev := put(b)
	close(release)
	select {
	case <-removed:
	case <-time.After(bound):
		t.Fatal("a's removal of b's keys did not end")
	}

	// A claim made on a now takes the clientId over from b's new run:
	// had a removed b's claim, b would have heard that first (in
	// revision order), forgotten the claim and heard no takeover.
	_, err = a.ClaimClient(ctx, "x", 9)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return slices.Equal(rec.takenOverList(), []string{"x/1"}) }, bound, 20*time.Millisecond, "b's new run hears its claim taken over")
	require.Empty(t, rec.removedList(), "claims of b's new run removed by a")

	later, err := a.PutSubscription(ctx, cluster.Subscription{Conn: 9, Pattern: "later", ClientID: "x"})
	require.NoError(t, err)
	require.NoError(t, a.Sync(ctx, later))
	for i, r := range []*recorder{recs[0], rec, recs[2]} {
		require.True(t, holds(r, key, rev), "node %s no longer holds the subscription of b's new run", ids[i])
	}
	registered, err := cluster.Registered(ctx, a, "b")
	require.NoError(t, err)
	require.True(t, registered, "the registration of b's new run removed")
}

// TestMinorityDoesNotAct: a node that hears fewer than a majority of the
// nodes (a partition, simulated by its dropping their heartbeats) does
// not act for those it lost: it handles none of them as down, and
// removes none of their keys. Once it hears a majority again, a node
// still silent is handled then, and only that one. (A partitioned node
// used to presume everyone else dead and, once healed, remove their
// keys.)
func TestMinorityDoesNotAct(t *testing.T) {
	var mu sync.Mutex
	var deafTo []string
	deafen := func(peers ...string) {
		mu.Lock()
		defer mu.Unlock()
		deafTo = peers
	}
	ids := []string{"a", "b", "c"}
	nodes, recs, _ := startClusterWith(t, ids, nil, func(id string, o *cluster.Options) {
		if id == "a" {
			cluster.Deafen(o, func(peer string) bool {
				mu.Lock()
				defer mu.Unlock()
				return slices.Contains(deafTo, peer)
			})
		}
	})
	a, b := nodes[0], nodes[1]
	ctx := t.Context()
	_, err := b.ClaimClient(ctx, "x", 1)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return slices.Equal(a.Live(), ids) }, bound, 20*time.Millisecond, "a hears everyone")

	deafen("b", "c")
	require.Eventually(t, func() bool { return errors.Is(a.Ready(), cluster.ErrNoQuorum) }, bound, 20*time.Millisecond, "a notices it is in a minority")
	require.False(t, a.Acting(), "a acts in a minority")
	require.Empty(t, recs[0].downList(), "a handled nodes as down in a minority")

	// a and b are a majority again: c, still silent, is handled now,
	// and b, heard again, is not.
	deafen("c")
	require.Eventually(t, func() bool { return len(recs[0].downList()) > 0 }, bound, 20*time.Millisecond, "a handles c once it hears a majority")
	require.Equal(t, []string{"c"}, recs[0].downList())
	require.True(t, a.Acting(), "a, the lowest id, with a majority")

	// b's keys are all there: a claim made on a takes b's over, which b
	// would not hear had its claim been removed first.
	_, err = a.ClaimClient(ctx, "x", 9)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return slices.Equal(recs[1].takenOverList(), []string{"x/1"}) }, bound, 20*time.Millisecond, "b hears its claim taken over")
	require.Empty(t, recs[1].removedList(), "b's claims removed by a")
	registered, err := cluster.Registered(ctx, a, "b")
	require.NoError(t, err)
	require.True(t, registered, "b's registration removed")

	deafen()
	require.Eventually(t, func() bool { return slices.Equal(a.Live(), ids) }, bound, 20*time.Millisecond, "a hears everyone again")
	require.Equal(t, []string{"c"}, recs[0].downList())
}

// TestPausedNodePresumesNoneDead: a node whose process did not run for
// longer than the node timeout (simulated: its check runs with a clock
// that far ahead) heard no heartbeat meanwhile, and holds that against
// none of its peers: they stay live. It used to presume them all dead
// on its first check after the pause; in the bus's cluster test, all
// three nodes of one process paused for 1.6 s, two of them heard the
// third first, and each removed the other's claims.
func TestPausedNodePresumesNoneDead(t *testing.T) {
	ids := []string{"a", "b", "c"}
	nodes, recs, _ := startClusterWith(t, ids, nil, nil)
	a := nodes[0]
	require.Eventually(t, func() bool { return slices.Equal(a.Live(), ids) }, bound, 20*time.Millisecond, "a hears everyone")

	cluster.CheckNodesAt(a, time.Now().Add(3*testNodeTimeout))
	require.Equal(t, ids, a.Live(), "a presumed nodes dead for its own pause")
	require.Empty(t, recs[0].downList(), "a handled nodes as down for its own pause")
}
