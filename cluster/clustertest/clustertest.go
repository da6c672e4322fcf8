// Package clustertest starts a bus cluster on loopback for tests: one bus
// node per id, each with an embedded NATS server routed to the others. It
// is apart from bustest so that a test package that needs no cluster
// does not link nats-server.
package clustertest

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/cluster"
	"github.com/bub-bus/bub/internal/testport"
)

// Cluster timings for tests: heartbeats fast enough that a dead node is
// noticed in a few seconds on a loaded two-core box.
const (
	Heartbeat   = 200 * time.Millisecond
	NodeTimeout = 1500 * time.Millisecond
	// Timeout bounds a cluster's start (JetStream's elections) and its
	// shutdown.
	Timeout = bustest.LongTimeout
)

// starts holds how to start each node of a running cluster again, for
// RestartNode.
var starts sync.Map // *bustest.Server -> func() (*bustest.Server, error)

// Start starts one bus node per id, forming one cluster on
// loopback: each gets a copy of opts (whose Store and Cluster must be nil)
// and an embedded NATS server routed to all the others. The nodes start
// concurrently, since each waits for JetStream's quorum, and stop together
// when the test ends: a node stopped after the others finds no quorum for
// its clean-up writes and would wait out its timeout.
//
// Under -short (make check) the test is skipped (FreePorts).
func Start(t testing.TB, opts *bus.Options, ids ...string) []*bustest.Server {
	t.Helper()
	return StartWrapped(t, opts, nil, ids...)
}

// StartWrapped is Start with each node's cluster seen through wrap, given
// the node's id, for a test that steers when a node's writes reach the
// others; nil wrap leaves them as they are.
func StartWrapped(t testing.TB, opts *bus.Options, wrap func(node string, c bus.Cluster) bus.Cluster, ids ...string) []*bustest.Server {
	t.Helper()
	return start(t, opts, wrap, nil, ids...)
}

// StartEach is Start with each node's options, its Cluster set, given to
// each before the node starts, and again before it restarts: for an
// add-on that needs the node's own cluster (cluster.StoreOf). each must
// not append to o.Extensions in place: the nodes share its array.
func StartEach(t testing.TB, opts *bus.Options, each func(node string, o *bus.Options), ids ...string) []*bustest.Server {
	t.Helper()
	return start(t, opts, nil, each, ids...)
}

// StartExtended is Start with each node's Options.Extensions made by
// extensions, given the node's id, at each start of the node (a restart
// too): an extension extends one server (the journal keeps its events).
func StartExtended(t testing.TB, opts *bus.Options, extensions func(node string) []bus.Extension, ids ...string) []*bustest.Server {
	t.Helper()
	return StartEach(t, opts, func(node string, o *bus.Options) { o.Extensions = extensions(node) }, ids...)
}

// start starts the cluster for Start, StartWrapped and StartEach.
func start(t testing.TB, opts *bus.Options, wrap func(node string, c bus.Cluster) bus.Cluster, each func(node string, o *bus.Options), ids ...string) []*bustest.Server {
	t.Helper()
	ports := FreePorts(t, len(ids))
	started := time.Now()
	nodes := make([]*bustest.Server, len(ids))
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
			HeartbeatInterval: Heartbeat,
			NodeTimeout:       NodeTimeout,
			StartTimeout:      Timeout,
			Logger:            clusterLog,
		}
		for j, p := range ports {
			if j != i {
				co.Routes = append(co.Routes, "nats://127.0.0.1:"+strconv.Itoa(p))
			}
		}
		// Each start, the first and any restart, is the same node: its
		// id, its store and its routes.
		var start func() (*bustest.Server, error)
		start = func() (*bustest.Server, error) {
			o := o
			o.Cluster = cluster.ForBus(co)
			if wrap != nil {
				o.Cluster = wrap(id, o.Cluster)
			}
			if each != nil {
				each(id, &o)
			}
			s, err := bustest.Serve(&o)
			if err != nil {
				return nil, fmt.Errorf("node %s: %w", id, err)
			}
			starts.Store(s, start)
			return s, nil
		}
		wg.Go(func() { nodes[i], errs[i] = start() })
	}
	wg.Wait()
	t.Logf("clustertest: cluster %v started in %v", ids, time.Since(started).Round(time.Millisecond))
	t.Cleanup(func() {
		stopping := time.Now()
		defer func() {
			t.Logf("clustertest: cluster %v stopped in %v", ids, time.Since(stopping).Round(time.Millisecond))
		}()
		var wg sync.WaitGroup
		for _, n := range nodes {
			if n != nil {
				wg.Go(func() { n.Stop(Timeout); starts.Delete(n) })
			}
		}
		wg.Wait()
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("clustertest: start cluster: %v", err)
	}
	return nodes
}

// RestartNode stops nodes[i], a node of a cluster Start started,
// and starts it again as the same node (its id, JetStream store and
// routes), at a new URL. A node the test crashed (bus.Crash) stops at
// once; one still running shuts down cleanly, leaving the cluster as an
// operator's restart does. The new node replaces nodes[i], which must
// be the slice Start returned, so that the cluster's clean-up
// stops it with the others; it is returned once it serves.
func RestartNode(t testing.TB, nodes []*bustest.Server, i int) *bustest.Server {
	t.Helper()
	old := nodes[i]
	v, ok := starts.LoadAndDelete(old)
	if !ok {
		t.Fatalf("clustertest: restart node %d: not a running node Start started", i)
	}
	began := time.Now()
	old.Stop(Timeout)
	s, err := v.(func() (*bustest.Server, error))()
	if err != nil {
		t.Fatalf("clustertest: restart: %v", err)
	}
	nodes[i] = s
	t.Logf("clustertest: node %d restarted in %v", i, time.Since(began).Round(time.Millisecond))
	return s
}

// FreePorts returns n loopback ports claimed for this test
// (testport.Claim), for a cluster whose routes must be known before any
// of its servers starts (nats-server binds its own listeners, and cannot
// be handed one bound on port 0).
//
// Every test that starts a cluster takes its ports here, so under -short
// (make check) the test is skipped here: a cluster takes seconds of
// elections to start, and make test runs every cluster test.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	if testing.Short() {
		t.Skip("clustertest: a cluster test; -short skips it, make test runs it")
	}
	return testport.Claim(t, n)
}
