package bustest

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/cluster"
)

// Cluster timings for tests: heartbeats fast enough that a dead node is
// noticed in a few seconds on a loaded two-core box.
const (
	ClusterHeartbeat   = 200 * time.Millisecond
	ClusterNodeTimeout = 1500 * time.Millisecond
	// ClusterTimeout bounds a cluster's start (JetStream's elections) and
	// its shutdown.
	ClusterTimeout = 30 * time.Second
)

// StartCluster starts one bus node per id, forming one cluster on
// loopback: each gets a copy of opts (whose Store and Cluster must be nil)
// and an embedded NATS server routed to all the others. The nodes start
// concurrently, since each waits for JetStream's quorum, and stop together
// when the test ends: a node stopped after the others finds no quorum for
// its clean-up writes and would wait out its timeout.
func StartCluster(t testing.TB, opts *bus.Options, ids ...string) []*Server {
	t.Helper()
	ports := FreePorts(t, len(ids))
	started := time.Now()
	nodes := make([]*Server, len(ids))
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		var o bus.Options
		if opts != nil {
			o = *opts
		}
		if o.Logger == nil {
			o.Logger = slog.New(slog.DiscardHandler)
		}
		// The cluster names the node in its own logs; the bus's are
		// told apart here.
		clusterLog := o.Logger
		o.Logger = o.Logger.With("node", id)
		co := &cluster.Options{
			Name:              "test",
			NodeID:            id,
			ClusterListen:     "127.0.0.1:" + strconv.Itoa(ports[i]),
			StoreDir:          t.TempDir(),
			HeartbeatInterval: ClusterHeartbeat,
			NodeTimeout:       ClusterNodeTimeout,
			StartTimeout:      ClusterTimeout,
			Logger:            clusterLog,
		}
		for j, p := range ports {
			if j != i {
				co.Routes = append(co.Routes, "nats://127.0.0.1:"+strconv.Itoa(p))
			}
		}
		// Each start, the first and any restart, is the same node: its
		// id, its store and its routes.
		var start func() (*Server, error)
		start = func() (*Server, error) {
			o := o
			o.Cluster = cluster.ForBus(co)
			s, err := serve(&o)
			if err != nil {
				return nil, fmt.Errorf("node %s: %w", id, err)
			}
			s.start = start
			return s, nil
		}
		wg.Go(func() { nodes[i], errs[i] = start() })
	}
	wg.Wait()
	t.Logf("bustest: cluster %v started in %v", ids, time.Since(started).Round(time.Millisecond))
	t.Cleanup(func() {
		stopping := time.Now()
		defer func() { t.Logf("bustest: cluster %v stopped in %v", ids, time.Since(stopping).Round(time.Millisecond)) }()
		var wg sync.WaitGroup
		for _, n := range nodes {
			if n != nil {
				wg.Go(func() { n.stop(ClusterTimeout) })
			}
		}
		wg.Wait()
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("bustest: start cluster: %v", err)
	}
	return nodes
}

// RestartNode stops nodes[i], a node of a cluster StartCluster started,
// and starts it again as the same node (its id, JetStream store and
// routes), at a new URL. A node the test crashed (bus.Crash) stops at
// once; one still running shuts down cleanly, leaving the cluster as an
// operator's restart does. The new node replaces nodes[i], which must
// be the slice StartCluster returned, so that the cluster's clean-up
// stops it with the others; it is returned once it serves.
func RestartNode(t testing.TB, nodes []*Server, i int) *Server {
	t.Helper()
	old := nodes[i]
	if old.start == nil {
		t.Fatalf("bustest: restart node %d: not a node StartCluster started", i)
	}
	began := time.Now()
	old.stop(ClusterTimeout)
	s, err := old.start()
	if err != nil {
		t.Fatalf("bustest: restart: %v", err)
	}
	nodes[i] = s
	t.Logf("bustest: node %d restarted in %v", i, time.Since(began).Round(time.Millisecond))
	return s
}

// FreePorts returns n loopback ports that were free a moment ago, for a
// cluster whose routes must be known before any of its servers starts.
// They are below Linux's ephemeral range (32768 and up): a port found by
// binding ":0" could be handed out again as the source port of another
// test's connection before the server binds it.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for try := 0; len(ports) < n; try++ {
		if try == 1000 {
			t.Fatalf("bustest: no %d free ports below 32768", n)
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(20000+rand.IntN(12000)))
		if err != nil {
			continue
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}
