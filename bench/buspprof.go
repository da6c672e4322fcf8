package main

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/journal"
	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/cluster"
)

// serveBusWithPprof runs the bus as bub serve does (a durable store in a
// temporary directory, default options but the limits busLimits lifts
// lifted, warn-level logs) with the
// net/http/pprof handlers mounted at /debug/pprof/, so that -profile can
// profile it under load without a pprof flag in bub serve. It samples
// blocking events and lock contention too. With node set it runs a node
// of that cluster instead, its state in JetStream under the temporary
// directory, as bub serve --cluster-name does. withJournal runs the
// message journal, as bub serve does unless --journal=false.
func serveBusWithPprof(listen string, node *cluster.Options, withJournal bool) error {
	dir, err := os.MkdirTemp("", "bench-bus-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	// Commits are counted in the bus's metrics, as bub serve counts them,
	// so that the profile of stored retries can tell records per commit.
	var running atomic.Pointer[bus.Server]
	opts := &bus.Options{
		Limits: bus.Limits{MaxConnections: -1, MaxConnectionsPerAddr: -1, MaxPatternWildcards: len(fanoutTail), MaxPending: -1, MaxPendingPerIdentity: -1, MaxStoredBytesPerIdentity: -1},
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	if withJournal {
		opts.Extensions = []bus.Extension{journal.New(nil)}
	}
	if node != nil {
		node.StoreDir = filepath.Join(dir, "nats")
		opts.Cluster = cluster.ForBus(node)
	} else {
		st, err := store.Open(dir, &store.Options{OnCommit: func(d time.Duration) {
			if srv := running.Load(); srv != nil {
				srv.ObserveStoreCommit(d)
			}
		}})
		if err != nil {
			return err
		}
		defer st.Close()
		opts.Store = st
	}
	srv, err := bus.New(opts)
	if err != nil {
		return err
	}
	running.Store(srv)
	// Blocking events and contended locks, sampled, for the block and
	// mutex profiles -profile saves: about one blocking event per 10 µs
	// spent blocked and one contention in 10, so that the sampling does
	// not weigh on the CPU profile of the same run.
	runtime.SetBlockProfileRate(10_000)
	runtime.SetMutexProfileFraction(10)
	defer srv.Shutdown(context.Background())
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.Handle("/", srv)
	return serveAndAnnounce(listen, mux)
}
