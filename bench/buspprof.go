package main

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"os"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/store"
)

// serveBusWithPprof runs the bus as bub serve does (a durable store in a
// temporary directory, default options, warn-level logs) with the
// net/http/pprof handlers mounted at /debug/pprof/, so that -profile can
// profile it under load without a pprof flag in bub serve.
func serveBusWithPprof(listen string) error {
	dir, err := os.MkdirTemp("", "bench-bus-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	st, err := store.Open(dir, nil)
	if err != nil {
		return err
	}
	defer st.Close()
	srv, err := bus.New(&bus.Options{Store: st, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		return err
	}
	defer srv.Shutdown(context.Background())
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.Handle("/", srv)
	return serveAndAnnounce(listen, mux)
}
