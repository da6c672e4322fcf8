package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// serveStarting answers on ln while the bus starts, which for a cluster
// node means waiting up to a minute for a majority of its nodes:
// /healthz says the process is alive, /readyz that it is starting, and
// anything else gets 503. The returned function stops that and hands ln
// back, still open and listening, for the bus to serve; a connection
// waiting in the backlog meanwhile is the bus's. The bus's own listener
// needs the bus (it counts connections against its limits), hence a
// server of its own here.
func serveStarting(ln net.Listener, tlsConfig *tls.Config, log *slog.Logger) (handOver func()) {
	h := &handingOver{Listener: ln}
	var l net.Listener = h
	if tlsConfig != nil {
		l = tls.NewListener(h, tlsConfig)
	}
	hs := &http.Server{
		Handler:           http.HandlerFunc(answerStarting),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = hs.Serve(l)
	}()
	return func() {
		h.done.Store(true)
		// Wakes the Accept under way; Serve then returns errHandedOver.
		_ = h.setDeadline(time.Now())
		<-done
		_ = h.setDeadline(time.Time{})
		// Closes the connections kept alive between health probes, and
		// then any still in a request (one stuck in its headers would
		// otherwise stay open until ReadHeaderTimeout, while the bus
		// serves).
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if hs.Shutdown(ctx) != nil {
			_ = hs.Close()
		}
	}
}

// answerStarting is the handler while the bus starts.
func answerStarting(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/healthz":
		fmt.Fprintln(w, "ok")
	case "/readyz":
		http.Error(w, "starting", http.StatusServiceUnavailable)
	default:
		http.Error(w, "bub-bus: starting; not serving yet", http.StatusServiceUnavailable)
	}
}

// errHandedOver ends the starting server's Serve.
var errHandedOver = errors.New("listener handed over to the bus")

// handingOver is the starting server's view of the listener: once done,
// Accept fails and ends Serve, and Close (which Serve and Shutdown call)
// leaves the listener open for the bus.
type handingOver struct {
	net.Listener
	done atomic.Bool
}

func (h *handingOver) Accept() (net.Conn, error) {
	c, err := h.Listener.Accept()
	if err != nil && h.done.Load() {
		return nil, errHandedOver
	}
	return c, err
}

func (h *handingOver) Close() error { return nil }

// setDeadline sets the listener's accept deadline, where it has one (a
// TCP listener does).
func (h *handingOver) setDeadline(t time.Time) error {
	if d, ok := h.Listener.(interface{ SetDeadline(time.Time) error }); ok {
		return d.SetDeadline(t)
	}
	return nil
}
