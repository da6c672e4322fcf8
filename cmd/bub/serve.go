package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/protocol"
)

func init() {
	register("serve", "run the bus daemon", runServe)
}

// serveConfig is bub serve's flags.
type serveConfig struct {
	listen          string
	serverID        string
	defaultPolicy   string
	deliveryTimeout time.Duration
	maxMessageBytes int64
	writeTimeout    time.Duration
	pingInterval    time.Duration
	maxInFlight     int
	drainTimeout    time.Duration
	dataDir         string
	maxAttempts     int
	retryBaseDelay  time.Duration
	retryDelayCap   time.Duration
	holdPatterns    string
	holdLifetime    time.Duration
	allowedOrigins  string
	logLevel        string
	logFormat       string
}

func (c *serveConfig) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.listen, "listen", "127.0.0.1:7892", "address to serve WebSocket peers and /healthz, /readyz, /metrics on")
	fs.StringVar(&c.serverID, "server-id", "", "serverId reported to peers (default: bub- and random hex)")
	fs.StringVar(&c.defaultPolicy, "default-policy", string(protocol.PolicyStopOnProcessed), "propagation policy of subscriptions that name none: stopPropagationOnProcessed, stopPropagationOnStop or continueAll")
	fs.DurationVar(&c.deliveryTimeout, "delivery-timeout", 30*time.Second, "how long a subscriber has to answer one processMessage")
	fs.Int64Var(&c.maxMessageBytes, "max-message-bytes", 1<<20, "largest WebSocket message accepted; larger closes the connection with 1009")
	fs.DurationVar(&c.writeTimeout, "write-timeout", 10*time.Second, "a peer that does not take a message within this is disconnected")
	fs.DurationVar(&c.pingInterval, "ping-interval", 30*time.Second, "WebSocket keepalive ping interval; a peer silent for one interval is dropped")
	fs.IntVar(&c.maxInFlight, "max-in-flight", 256, "sendMessage and dlq.* calls one connection may have running; more are refused with -32006")
	fs.DurationVar(&c.drainTimeout, "drain-timeout", 30*time.Second, "on SIGINT/SIGTERM, how long running deliveries get to finish")
	fs.StringVar(&c.dataDir, "data-dir", "./data", "directory of the durable store (pending retries, held messages, dead letters); created if missing")
	fs.IntVar(&c.maxAttempts, "max-attempts", 5, "delivery attempts per subscriber before a message is dead-lettered")
	fs.DurationVar(&c.retryBaseDelay, "retry-base-delay", time.Second, "first retry delay when the subscriber gives no retry_seconds; doubles per attempt, with jitter")
	fs.DurationVar(&c.retryDelayCap, "retry-delay-cap", 5*time.Minute, "longest retry delay, retry_seconds included")
	fs.DurationVar(&c.holdLifetime, "hold-lifetime", time.Hour, "how long a held message waits for a subscriber, from its publish, before it is dead-lettered (no_subscribers); survives restarts")
	fs.StringVar(&c.holdPatterns, "hold-patterns", "agent:*", "comma-separated topic patterns whose messages are held when nobody subscribes, until a subscriber appears")
	fs.StringVar(&c.allowedOrigins, "allowed-origins", "", "comma-separated browser origins (host patterns) allowed to connect; clients without an Origin header are always allowed")
	fs.StringVar(&c.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&c.logFormat, "log-format", "text", "text or json")
}

func runServe(ctx context.Context, io stdio, args []string) int {
	var cfg serveConfig
	fs := newFlagSet(io, "serve [flags]", "serve [flags]\n\nRuns the bus: peers connect to ws://LISTEN/ and speak JSON-RPC 2.0 (docs/PROTOCOL.md).")
	cfg.addFlags(fs)
	bindAllEnv(fs) // every flag of the daemon is a deployment's setting
	if code, ok := parseFlags(fs, io, args); !ok {
		return code
	}
	logger, err := newLogger(io, cfg.logLevel, cfg.logFormat)
	if err != nil {
		return errorf(io, "%v", err)
	}
	// The store records commit latency into the bus's metrics, which do
	// not exist until the bus does.
	var running atomic.Pointer[bus.Server]
	st, err := store.Open(cfg.dataDir, &store.Options{OnCommit: func(d time.Duration) {
		if srv := running.Load(); srv != nil {
			srv.ObserveStoreCommit(d)
		}
	}})
	if err != nil {
		return errorf(io, "serve: %v", err)
	}
	defer st.Close()
	srv, err := bus.New(&bus.Options{
		Store:           st,
		MaxAttempts:     cfg.maxAttempts,
		RetryBaseDelay:  cfg.retryBaseDelay,
		RetryDelayCap:   cfg.retryDelayCap,
		HoldPatterns:    splitList(cfg.holdPatterns),
		HoldLifetime:    cfg.holdLifetime,
		ServerID:        cfg.serverID,
		DefaultPolicy:   protocol.Policy(cfg.defaultPolicy),
		DeliveryTimeout: cfg.deliveryTimeout,
		MaxMessageBytes: cfg.maxMessageBytes,
		WriteTimeout:    cfg.writeTimeout,
		PingInterval:    cfg.pingInterval,
		MaxInFlight:     cfg.maxInFlight,
		OriginPatterns:  splitList(cfg.allowedOrigins),
		Logger:          logger,
	})
	if err != nil {
		return errorf(io, "serve: %v", err)
	}
	running.Store(srv)
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return errorf(io, "serve: listen on %s: %v", cfg.listen, err)
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	logger.Info("bus listening", "url", "ws://"+ln.Addr().String()+"/", "data_dir", cfg.dataDir, "default_policy", cfg.defaultPolicy)

	select {
	case err := <-served:
		return errorf(io, "serve: %v", err)
	case <-ctx.Done():
	}
	logger.Info("shutting down", "drain_timeout", cfg.drainTimeout)
	drainCtx, cancel := context.WithTimeout(context.Background(), cfg.drainTimeout)
	defer cancel()
	// Stop accepting first; the bus then drains and closes its peers,
	// which http.Server.Shutdown does not do for hijacked connections.
	_ = ln.Close()
	if err := srv.Shutdown(drainCtx); err != nil {
		logger.Warn("shutdown incomplete", "err", err)
	}
	if err := hs.Shutdown(drainCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		logger.Warn("http shutdown", "err", err)
	}
	logger.Info("bus stopped")
	return 0
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	list := []string{}
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			list = append(list, item)
		}
	}
	return list
}

func newLogger(io stdio, level, format string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(io.err, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(io.err, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}
