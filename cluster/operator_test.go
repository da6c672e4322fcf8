package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/cluster"
	"github.com/bub-bus/bub/cluster/clustertest"
	"github.com/bub-bus/bub/internal/checkfor"
)

// soloOptions are the options of a node alone on an embedded server,
// with its JetStream store in storeDir.
func soloOptions(storeDir string) *cluster.Options {
	return &cluster.Options{
		Name: "solo", NodeID: "solo",
		ClusterListen: "127.0.0.1:0", StoreDir: storeDir,
		HeartbeatInterval: testHeartbeat, NodeTimeout: testNodeTimeout,
		StartTimeout: bound,
		Logger:       testLogger(),
	}
}

// TestStoreDirLocked: a second node started on a running node's
// directory is refused before its NATS server touches the directory,
// as a second single node is; the first runs on, and once it is closed
// the directory is free again.
func TestStoreDirLocked(t *testing.T) {
	dir := t.TempDir()
	first, err := cluster.Start(t.Context(), soloOptions(dir), noHandler)
	if err != nil {
		t.Fatal(err)
	}
	second, err := cluster.Start(t.Context(), soloOptions(dir), noHandler)
	if err == nil {
		second.Crash()
		first.Crash()
		t.Fatal("a second node started on a running node's directory")
	}
	if !errors.Is(err, cluster.ErrStoreLocked) || !strings.Contains(err.Error(), "locked by another process") || !strings.Contains(err.Error(), dir) {
		t.Errorf("second start: %v, want ErrStoreLocked naming %s", err, dir)
	}
	ctx, cancel := context.WithTimeout(t.Context(), bound)
	defer cancel()
	if err := first.Ready(); err != nil {
		t.Errorf("the running node after the refused start: %v", err)
	}
	if _, err := first.PutSubscription(ctx, cluster.Subscription{Conn: 1, Pattern: "*", ClientID: "x"}); err != nil {
		t.Errorf("the running node cannot write after the refused start: %v", err)
	}
	if err := first.Close(ctx); err != nil {
		t.Fatal(err)
	}
	again, err := cluster.Start(t.Context(), soloOptions(dir), noHandler)
	if err != nil {
		t.Fatalf("start on the directory a closed node left: %v", err)
	}
	if err := again.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestStartFailsFastOnPortInUse: a cluster listen address another
// process holds fails Start at once, naming the address, instead of
// waiting StartTimeout for routes that cannot come.
func TestStartFailsFastOnPortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peer := clustertest.FreePorts(t, 1)[0]
	opts := soloOptions(t.TempDir())
	opts.ClusterListen = ln.Addr().String()
	opts.Routes = []string{"nats://127.0.0.1:" + strconv.Itoa(peer)}
	start := time.Now()
	n, err := cluster.Start(t.Context(), opts, noHandler)
	took := time.Since(start)
	if err == nil {
		n.Crash()
		t.Fatal("started on a cluster port in use")
	}
	t.Logf("failed after %v: %v", took, err)
	if !strings.Contains(err.Error(), ln.Addr().String()) || !strings.Contains(err.Error(), "address already in use") {
		t.Errorf("error %q does not name the address in use, %s", err, ln.Addr())
	}
	if took > bound/3 {
		t.Errorf("took %v to fail; want at once", took)
	}
}

// TestStartStopsWhenCancelled: a node waiting for JetStream (its routes
// lead nowhere, so there is no quorum) gives up as soon as its context
// ends, leaving no goroutine behind (TestMain's leak check).
func TestStartStopsWhenCancelled(t *testing.T) {
	peers := clustertest.FreePorts(t, 3)
	opts := soloOptions(t.TempDir())
	opts.ClusterListen = "127.0.0.1:" + strconv.Itoa(peers[0])
	opts.Routes = []string{"nats://127.0.0.1:" + strconv.Itoa(peers[1]), "nats://127.0.0.1:" + strconv.Itoa(peers[2])}
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(time.Second, cancel)
	start := time.Now()
	n, err := cluster.Start(ctx, opts, noHandler)
	took := time.Since(start)
	if err == nil {
		n.Crash()
		t.Fatal("started without a quorum")
	}
	t.Logf("stopped %v after the cancel: %v", took-time.Second, err)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v, want context.Canceled", err)
	}
	if took > 6*time.Second {
		t.Errorf("took %v after the cancel to stop", took-time.Second)
	}
}

// TestMinority: a node whose two peers are gone (one left, one crashed)
// says it is not ready within a node timeout of the last loss, and its
// writes fail at once, saying that it has no quorum and how many nodes
// it reaches, instead of timing out on JetStream.
func TestMinority(t *testing.T) {
	nodes, _ := startCluster(t, []string{"a", "b", "c"}, nil)
	a, b, c := nodes[0], nodes[1], nodes[2]
	ctx, cancel := context.WithTimeout(t.Context(), bound)
	defer cancel()
	require.Eventually(t, func() bool { return a.Ready() == nil }, bound, 20*time.Millisecond, "a ready")
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// Two of three is a quorum: a is ready, once JetStream has moved
	// the meta leader if b held it (a moment of "not current").
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NoError(c, a.Ready(), "a with two of three nodes")
	}, bound, 20*time.Millisecond)
	c.Crash()
	lost := time.Now()
	const want = "no quorum: 1 of 3 nodes reachable"
	// Within a node timeout and a heartbeat on a quiet box (the log line
	// says how long it took); the wait's bound is a safety net, not the
	// promise, which no test on a loaded box can time.
	checkfor.Check(t, bound, func() error {
		err := a.Ready()
		if err != nil && strings.Contains(err.Error(), want) && errors.Is(err, cluster.ErrNoQuorum) {
			t.Logf("not ready %v after the second loss: %v", time.Since(lost), err)
			return nil
		}
		return fmt.Errorf("a still says ready (%v) %v after losing two of three nodes", err, time.Since(lost))
	})

	start := time.Now()
	_, err := a.PutSubscription(ctx, cluster.Subscription{Conn: 1, Pattern: "*", ClientID: "x"})
	checkNoQuorum(t, "put subscription", err, want)
	_, err = a.ClaimClient(ctx, "x", 1)
	checkNoQuorum(t, "claim", err, want)
	err = a.Store().PutPending(&store.Pending{Message: store.Message{ID: "m-1", Topic: "t"}})
	checkNoQuorum(t, "put pending", err, want)
	_, err = a.Store().DeadLetter("", &store.DeadLetter{Message: store.Message{ID: "m-2", Topic: "t"}, Reason: "max_retries"})
	checkNoQuorum(t, "dead-letter", err, want)
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("four refused writes took %v; want them refused at once", took)
	}
}

func checkNoQuorum(t *testing.T, what string, err error, want string) {
	t.Helper()
	if !errors.Is(err, cluster.ErrNoQuorum) || !strings.Contains(err.Error(), want) {
		t.Errorf("%s in a minority: %v, want %q", what, err, want)
	}
}
