package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/bub-bus/bub/auth"
	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/admin"
	"github.com/bub-bus/bub/bus/console"
	"github.com/bub-bus/bub/bus/httpapi"
	"github.com/bub-bus/bub/bus/journal"
	busotel "github.com/bub-bus/bub/bus/otel"
	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/bus/toolsub"
	"github.com/bub-bus/bub/bus/webhook"
	"github.com/bub-bus/bub/cluster"
	"github.com/bub-bus/bub/protocol"
)

func init() {
	register("serve", "run the bus daemon", runServe)
}

// serveConfig is bub serve's flags, and the file they may come from.
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
	// idempotencyWindow is how long an HTTP publish's Idempotency-Key is
	// kept.
	idempotencyWindow time.Duration
	// journal is on unless --journal=false; journalOpts is the rest.
	journal     bool
	journalOpts journal.Options
	// toolSubs are the tool subscription limits.
	toolSubsPerThread, toolSubsMax int
	toolEventRate                  float64
	toolEventBurst                 int
	allowedOrigins                 string
	logLevel                       string
	logFormat                      string
	// otlpEndpoint is the OTLP/HTTP collector traces go to; "": none.
	otlpEndpoint string

	configPath     string
	printConfig    bool
	tlsCert        string
	tlsKey         string
	tlsClientCA    string
	hosts          string
	allowAnonymous bool
	limits         bus.Limits
	cluster        clusterFlags
	// webhookAllowPrivate lets webhook subscriptions call inside
	// addresses (SSRF).
	webhookAllowPrivate bool

	// maxTokenLifetime bounds the JWTs the bus accepts; a reload applies
	// it with the auth: section.
	maxTokenLifetime time.Duration

	// a2aConfig is the --a2a-config file; "": A2A off.
	a2aConfig string

	// file is the loaded configuration file; nil without --config.
	file *configFile
}

func (c *serveConfig) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.listen, "listen", "127.0.0.1:7892", "address to serve WebSocket peers and /healthz, /readyz, /metrics on")
	fs.StringVar(&c.serverID, "server-id", "", "serverId reported to peers and the from of the bus's events; no peer may take it, or any bub- id, as its clientId (default: bub- and random hex)")
	fs.StringVar(&c.defaultPolicy, "default-policy", string(protocol.PolicyStopOnProcessed), "propagation policy of subscriptions that name none: stopPropagationOnProcessed, stopPropagationOnStop or continueAll")
	fs.DurationVar(&c.deliveryTimeout, "delivery-timeout", 30*time.Second, "how long a subscriber has to answer one processMessage")
	fs.Int64Var(&c.maxMessageBytes, "max-message-bytes", 1<<20, "largest WebSocket message accepted; larger closes the connection with 1009")
	fs.DurationVar(&c.writeTimeout, "write-timeout", 10*time.Second, "a peer that does not take a message within this is disconnected")
	fs.DurationVar(&c.pingInterval, "ping-interval", 30*time.Second, "WebSocket keepalive ping interval; a peer silent for one interval is dropped")
	fs.IntVar(&c.maxInFlight, "max-in-flight", 256, "sendMessage and dlq.* calls one connection may have running; more are refused with -32006")
	fs.DurationVar(&c.drainTimeout, "drain-timeout", 30*time.Second, "on SIGINT/SIGTERM, how long running deliveries get to finish")
	fs.StringVar(&c.dataDir, "data-dir", "./data", "directory of the durable store (pending retries, held messages, dead letters); created if missing. With --cluster-name, JetStream keeps them in DATA_DIR/nats instead")
	fs.IntVar(&c.maxAttempts, "max-attempts", 5, "delivery attempts per subscriber before a message is dead-lettered")
	fs.DurationVar(&c.retryBaseDelay, "retry-base-delay", time.Second, "first retry delay when the subscriber gives no retry_seconds; doubles per attempt, with jitter")
	fs.DurationVar(&c.retryDelayCap, "retry-delay-cap", 5*time.Minute, "longest retry delay, retry_seconds included")
	fs.DurationVar(&c.holdLifetime, "hold-lifetime", time.Hour, "how long a held message waits for a subscriber, from its publish, before it is dead-lettered (no_subscribers); survives restarts")
	fs.DurationVar(&c.idempotencyWindow, "idempotency-window", 24*time.Hour, "how long POST /v1/messages keeps an Idempotency-Key: a repeat with the same key and body within it gets the first answer and publishes nothing; survives restarts (refused on a cluster)")
	fs.IntVar(&c.toolSubsPerThread, "max-tool-subscriptions-per-thread", 16, "active tool subscriptions one thread (group_id) may have; toolSubscriptions.start past it is refused with -32011")
	fs.IntVar(&c.toolSubsMax, "max-tool-subscriptions", 100000, "active tool subscriptions the bus keeps in all")
	fs.Float64Var(&c.toolEventRate, "tool-event-rate", 10, "events per second one tool subscription may post to its callback, a token bucket; beyond it the callback answers 429 with Retry-After")
	fs.IntVar(&c.toolEventBurst, "tool-event-burst", 20, "size of each tool subscription's event token bucket")
	fs.BoolVar(&c.journal, "journal", true, "record what happens to each message in memory, for GET /v1/events, bub trace and bub tail (docs/OPERATIONS.md, Message journal)")
	fs.DurationVar(&c.journalOpts.MaxAge, "journal-max-age", time.Hour, "drop journal events older than this")
	fs.Int64Var(&c.journalOpts.MaxBytes, "journal-max-bytes", 64<<20, "memory the journal may hold, as estimated; the oldest events are dropped beyond it")
	fs.BoolVar(&c.journalOpts.Payloads, "journal-payloads", false, "also journal each accepted message's payload (off: payloads may be private, and large)")
	fs.StringVar(&c.otlpEndpoint, "otlp-endpoint", "", "OTLP/HTTP collector to send traces to, as http://collector:4318 (/v1/traces is added to a URL without a path): a span per publish and per delivery attempt, continuing the publisher's traceparent; OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER and OTEL_EXPORTER_OTLP_HEADERS apply. Default: no tracing")
	fs.StringVar(&c.holdPatterns, "hold-patterns", "agent:*", "comma-separated topic patterns whose messages are held when nobody subscribes, until a subscriber appears")
	fs.StringVar(&c.allowedOrigins, "allowed-origins", "", "comma-separated browser origins (host patterns) allowed to connect; clients without an Origin header are always allowed")
	fs.StringVar(&c.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&c.logFormat, "log-format", "text", "text or json")

	fs.StringVar(&c.configPath, "config", "", "YAML configuration file: serve's settings in snake_case, limits: and auth: (docs/SECURITY.md); flags and BUB_* variables win over it; SIGHUP reloads its auth and limits")
	fs.BoolVar(&c.printConfig, "print-config", false, "print the effective configuration as YAML, secrets redacted, and exit")
	fs.StringVar(&c.tlsCert, "tls-cert", "", "PEM certificate (chain) file: serve wss:// and HTTPS instead of ws:// and HTTP; SIGHUP reloads it")
	fs.StringVar(&c.tlsKey, "tls-key", "", "PEM private key file of --tls-cert")
	fs.StringVar(&c.tlsClientCA, "tls-client-ca", "", "PEM CA file: peers may present a client certificate signed by it, whose subject CN names an auth identity (mutual TLS)")
	fs.StringVar(&c.hosts, "hosts", "", "comma-separated Host header values an upgrade may carry besides the listen address (the names the bus is reached by), against DNS rebinding")
	fs.BoolVar(&c.allowAnonymous, "allow-anonymous", false, "allow an open bus (no auth: section) on a non-loopback --listen address")
	fs.BoolVar(&c.webhookAllowPrivate, "webhook-allow-private", false, "let webhook subscriptions (webhooks: out:) POST to loopback, private and link-local addresses; refused by default, checked on the address dialled, so that a configured URL cannot reach inside the network (docs/SECURITY.md)")
	fs.DurationVar(&c.maxTokenLifetime, "max-token-lifetime", auth.DefaultMaxTokenLifetime, "longest a signed token (JWT) may be valid, from its iat to its exp; a longer one is refused. SIGHUP reloads it with auth:")

	l := &c.limits
	fs.IntVar(&l.MaxConnections, "max-connections", 0, "connections in all (0: 10000; negative: no limit)")
	fs.IntVar(&l.MaxConnectionsPerAddr, "max-connections-per-addr", 0, "connections from one remote IP address (0: 256; negative: no limit)")
	fs.DurationVar(&l.HandshakeTimeout, "handshake-timeout", 0, "time a connection has to initialize before it is closed, and to send an HTTP request or idle between two (0: 10s); a reload (SIGHUP) changes the initialize deadline only, the HTTP timeouts stay those bub serve started with")
	fs.IntVar(&l.MaxSubscriptions, "max-subscriptions", 0, "subscriptions per connection (0: 1000; negative: no limit)")
	fs.IntVar(&l.MaxTopicBytes, "max-topic-bytes", 0, "longest topic or pattern, in bytes (0: the protocol's maximum)")
	fs.IntVar(&l.MaxPatternWildcards, "max-pattern-wildcards", 0, "wildcards (* and ?) and classes in one pattern, so no subscription makes routing slow (0: 8)")
	fs.IntVar(&l.MaxPending, "max-pending", 0, "stored retries and held messages in all (0: 100000; negative: no limit)")
	fs.IntVar(&l.MaxPendingPerIdentity, "max-pending-per-identity", 0, "stored retries and held messages counting against one identity: its held publishes, the retries waiting on it (0: 10000; negative: no limit)")
	fs.IntVar(&l.MaxStoredBytes, "max-stored-bytes", 0, "bytes of stored retries and held messages in all (0: 1 GiB; negative: no limit)")
	fs.IntVar(&l.MaxStoredBytesPerIdentity, "max-stored-bytes-per-identity", 0, "bytes of stored retries, held messages and idempotency records counting against one identity (0: 64 MiB; negative: no limit)")
	fs.IntVar(&l.MaxDeadLetters, "max-dead-letters", 0, "entries in the dead-letter queue; at the cap, messages due there stay pending (0: 100000; negative: no limit)")
	fs.IntVar(&l.MaxDeadLetterBytes, "max-dead-letter-bytes", 0, "bytes in the dead-letter queue (0: 1 GiB; negative: no limit)")
	fs.IntVar(&l.MaxReplayIDs, "max-replay-ids", 0, "ids one dlq.replay takes (0: 1000)")
	fs.IntVar(&l.MaxDurablePerIdentity, "max-durable-per-identity", 0, "durable subscriptions one identity may hold, across its clientIds (0: 100; negative: no limit)")
	fs.IntVar(&l.MaxIdempotencyKeysPerIdentity, "max-idempotency-keys-per-identity", 0, "idempotency keys one identity may hold within the idempotency window, across every door; a new one beyond is refused (0: 10000; negative: no limit)")
	fs.IntVar(&l.MaxConnectionsPerIdentity, "max-connections-per-identity", 0, "initialized WebSocket connections one authenticated identity may hold, across its clientIds and addresses (0: 1000; negative: no limit)")
	fs.IntVar(&l.MaxStreamsPerIdentity, "max-streams-per-identity", 0, "journal event streams (SSE) one authenticated identity may hold open (0: 64; negative: no limit)")
	fs.IntVar(&l.MaxHTTPPublishersPerIdentity, "max-http-publishers-per-identity", 0, "clientIds one identity publishes as over HTTP that the bus keeps, each with its order; beyond it its least recently used is forgotten (0: 256; negative: no limit)")
	fs.IntVar(&l.SlowSubscriberTimeouts, "slow-subscriber-timeouts", 0, "consecutive delivery timeouts after which the bus stops waiting on a subscriber (0: 3)")
	fs.Float64Var(&l.PublishRate, "publish-rate", 0, "sendMessage calls per second per identity, a token bucket shared by its connections and HTTP publishers (per clientId on an open bus); an identity may set its own (0: no limit)")
	fs.IntVar(&l.PublishBurst, "publish-burst", 0, "size of the publish token bucket (0: max(1, --publish-rate))")

	c.cluster.addFlags(fs)
	c.addA2AFlags(fs)
}

// resolvedFlags returns a FlagSet holding cfg's values with the limits'
// zeros ("0: the default") replaced by the values in force, for
// --print-config: it showed handshake_timeout: 0s where --help says 0
// means 10s. The output still reads back as the same configuration.
func resolvedFlags(cfg *serveConfig) *flag.FlagSet {
	shown, fs := newServeFlags(stdio{err: io.Discard})
	*shown = *cfg
	shown.limits = cfg.limits.Resolved()
	return fs
}

// tlsFiles are the TLS settings.
func (c *serveConfig) tlsFiles() tlsFiles {
	return tlsFiles{cert: c.tlsCert, key: c.tlsKey, clientCA: c.tlsClientCA}
}

// hasAuth reports whether the configuration has an auth: section.
func (c *serveConfig) hasAuth() bool { return c.file != nil && c.file.auth != nil }

// newServeFlags returns a serveConfig bound to a new FlagSet.
func newServeFlags(io stdio) (*serveConfig, *flag.FlagSet) {
	var cfg serveConfig
	fs := newFlagSet(io, "serve [flags]", "serve [flags]\n\nRuns the bus: peers connect to ws://LISTEN/ (wss:// with --tls-cert) and speak JSON-RPC 2.0 (docs/PROTOCOL.md).\nSettings come from flags, then BUB_* variables, then the --config file, then the defaults below.")
	cfg.addFlags(fs)
	bindAllEnv(fs) // every flag of the daemon is a deployment's setting
	return &cfg, fs
}

// applyFile loads the --config file (or BUB_CONFIG) under the settings
// fs already holds. The flags set so far, on the command line or from
// the environment, keep their values; the defaults fs shows in --help
// are untouched, as the file is applied with Set.
func (c *serveConfig) applyFile(fs *flag.FlagSet) error {
	if c.configPath == "" {
		return nil
	}
	explicit := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
	_, scratch := newServeFlags(stdio{err: io.Discard})
	cf, err := readConfigFile(c.configPath, fs, scratch, explicit)
	if err != nil {
		return err
	}
	c.file = cf
	return nil
}

// loadServeConfig builds the configuration from args, the environment
// and the file again, quietly, as a SIGHUP does.
func loadServeConfig(args []string) (*serveConfig, *flag.FlagSet, error) {
	quiet := stdio{err: io.Discard}
	cfg, fs := newServeFlags(quiet)
	if _, ok := parseFlags(fs, quiet, args); !ok {
		return nil, nil, errors.New("the command line or BUB_* environment no longer parses")
	}
	if err := cfg.applyFile(fs); err != nil {
		return nil, nil, err
	}
	return cfg, fs, nil
}

// noAuthWarning is logged whenever the bus runs without an auth section.
const noAuthWarning = "no auth configured: any peer may act as any clientId; see docs/SECURITY.md"

func runServe(ctx context.Context, io stdio, args []string) int {
	cfg, fs := newServeFlags(io)
	if code, ok := parseFlags(fs, io, args); !ok {
		return code
	}
	if err := cfg.applyFile(fs); err != nil {
		return errorf(io, "serve: %v", err)
	}
	clusterOpts, err := cfg.cluster.options(fs, cfg.dataDir)
	if err != nil {
		return usageError(io, fs, "%v", err)
	}
	if cfg.printConfig {
		if err := printConfig(io.out, resolvedFlags(cfg), cfg.file); err != nil {
			return errorf(io, "serve: %v", err)
		}
		return 0
	}
	logger, err := newLogger(io, cfg.logLevel, cfg.logFormat)
	if err != nil {
		return errorf(io, "%v", err)
	}
	if err := checkOpenBus(cfg.listen, cfg.hasAuth(), cfg.allowAnonymous); err != nil {
		return errorf(io, "serve: %v", err)
	}
	// SIGHUP's default action ends the process; take it over before
	// anything could send one.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	var certs *certStore
	if cfg.tlsFiles().enabled() {
		if certs, err = newCertStore(cfg.tlsFiles()); err != nil {
			return errorf(io, "serve: %v", err)
		}
	}
	authn, err := loadAuth(cfg)
	if err != nil {
		return errorf(io, "serve: %v", err)
	}
	hooks, webhookSubs, err := loadWebhooks(cfg.file)
	if err != nil {
		return errorf(io, "serve: %v", err)
	}
	var node string
	if clusterOpts != nil {
		node = clusterOpts.NodeID
	}
	a2aDoor, err := newA2ADoor(cfg, node, authn, logger)
	if err != nil {
		return errorf(io, "serve: %v", err)
	}
	// The store records commit latency into the bus's metrics, which do
	// not exist until the bus does.
	var running atomic.Pointer[bus.Server]
	var cl bus.Cluster
	// db is a single node's store, which the webhook subscriptions
	// webhook.add makes and the tool subscriptions keep: a cluster keeps
	// its state in JetStream (and no webhook subscriptions yet).
	var db *store.Store
	if clusterOpts != nil {
		// A cluster keeps its durable state in JetStream, under
		// DATA_DIR/nats; no bbolt file is opened.
		clusterOpts.Logger = logger
		cl = cluster.ForBus(clusterOpts)
	} else {
		db, err = store.Open(cfg.dataDir, &store.Options{OnCommit: func(d time.Duration) {
			if srv := running.Load(); srv != nil {
				srv.ObserveStoreCommit(d)
			}
		}})
		if err != nil {
			return errorf(io, "serve: %v", err)
		}
		defer db.Close()
	}
	jn := journal.New(cfg.journalOptions())
	extensions := []bus.Extension{
		jn,
		httpapi.API{},
		admin.Extension{},
		webhook.New(webhook.Options{
			Hooks:         hooks,
			Subscriptions: webhookSubs,
			AllowPrivate:  cfg.webhookAllowPrivate,
			Store:         db,
		}),
		console.Extension{Journal: jn},
		toolSubscriptions(cfg, db, cl),
	}
	if cfg.otlpEndpoint != "" {
		tp, err := newTracerProvider(ctx, cfg.otlpEndpoint, logger)
		if err != nil {
			return errorf(io, "serve: %v", err)
		}
		// Deferred: it runs once the bus has stopped, so that the
		// bus's last spans are exported.
		defer flushTraces(tp, logger)
		extensions = append(extensions, busotel.New(&busotel.Options{TracerProvider: tp}))
	}
	// Listening comes before the bus: a cluster node's start waits for a
	// majority of its nodes, for up to a minute, and meanwhile /healthz
	// says the process is alive and /readyz that it is not ready yet.
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return errorf(io, "serve: listen on %s: %v", cfg.listen, err)
	}
	scheme := "ws://"
	var tlsConfig *tls.Config
	if certs != nil {
		// One listener for wss:// and HTTPS: the handler sees r.TLS, and
		// with it a verified client certificate.
		tlsConfig = certs.listenerConfig()
		scheme = "wss://"
	}
	handOver := serveStarting(ln, tlsConfig, logger)
	if clusterOpts != nil {
		logger.Info("cluster node starting: waiting for a majority of the nodes; /healthz answers, /readyz says starting", "url", scheme+ln.Addr().String()+"/")
	}
	srv, err := bus.NewContext(ctx, &bus.Options{
		Store:             db,
		Cluster:           cl,
		MaxAttempts:       cfg.maxAttempts,
		RetryBaseDelay:    cfg.retryBaseDelay,
		RetryDelayCap:     cfg.retryDelayCap,
		HoldPatterns:      splitList(cfg.holdPatterns),
		HoldLifetime:      cfg.holdLifetime,
		IdempotencyWindow: cfg.idempotencyWindow,

		ServerID:        cfg.serverID,
		DefaultPolicy:   protocol.Policy(cfg.defaultPolicy),
		DeliveryTimeout: cfg.deliveryTimeout,
		MaxMessageBytes: cfg.maxMessageBytes,
		WriteTimeout:    cfg.writeTimeout,
		PingInterval:    cfg.pingInterval,
		MaxInFlight:     cfg.maxInFlight,
		OriginPatterns:  splitList(cfg.allowedOrigins),
		Logger:          logger,
		Auth:            authn,
		Hosts:           splitList(cfg.hosts),
		Limits:          cfg.limits,
		Extensions:      extensions,
	})
	handOver()
	if err != nil {
		ln.Close()
		if ctx.Err() != nil {
			// Asked to stop (SIGINT, SIGTERM) while starting: nothing
			// was served yet, so there is nothing to drain.
			logger.Info("stopped while starting", "err", err)
			return 0
		}
		return errorf(io, "serve: %v", err)
	}
	running.Store(srv)
	// Said once the store is open, so that a store refused at start
	// leaves one line, not a warning about something else first.
	if authn == nil {
		logger.Warn(noAuthWarning)
	} else {
		logger.Info("auth configured", "file", cfg.file.path, "identities", len(cfg.file.auth.Identities), "issuers", len(cfg.file.auth.Issuers), "anonymous", cfg.file.auth.Anonymous != nil)
	}
	// Every accepted connection counts against the connection limits.
	serveLn := srv.Listener(ln, tlsConfig)
	hs := &http.Server{ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	srv.ConfigureHTTP(hs)
	a2aDoor.mount(hs)
	defer a2aDoor.close()
	served := make(chan error, 1)
	go func() { served <- hs.Serve(serveLn) }()
	if err := a2aDoor.start(ctx, ln.Addr(), srv.Registry(), cl, logger); err != nil {
		return errorf(io, "serve: %v", err)
	}
	attrs := []any{"url", scheme + ln.Addr().String() + "/", "data_dir", cfg.dataDir, "default_policy", cfg.defaultPolicy}
	if clusterOpts != nil {
		attrs = append(attrs, clusterLogAttrs(clusterOpts)...)
	}
	logger.Info("bus listening", attrs...)

	rl := &reloader{args: args, log: logger, srv: srv, certs: certs, a2a: a2aDoor, started: fs, limits: cfg.limits, hasAuth: authn != nil, listen: cfg.listen, allowAnonymous: cfg.allowAnonymous}
serving:
	for {
		select {
		case err := <-served:
			return errorf(io, "serve: %v", err)
		case <-hup:
			rl.reload()
		case <-ctx.Done():
			break serving
		}
	}
	logger.Info("shutting down", "drain_timeout", cfg.drainTimeout)
	// Before the drain: its open streams would hold up hs.Shutdown.
	a2aDoor.close()
	drainCtx, cancel := context.WithTimeout(context.Background(), cfg.drainTimeout)
	defer cancel()
	// The listener stays open while the bus drains: a load balancer
	// reads /readyz "503 draining" and /healthz "ok" rather than a
	// refused connection, and new peers get a 503. The bus closes its
	// peers, which http.Server.Shutdown does not do for hijacked
	// connections; Shutdown then closes the listener.
	if err := srv.Shutdown(drainCtx); err != nil {
		logger.Warn("shutdown incomplete", "err", err)
	}
	if err := hs.Shutdown(drainCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		logger.Warn("http shutdown", "err", err)
	}
	logger.Info("bus stopped")
	return 0
}

// checkOpenBus refuses an open bus (no auth: section) on an address other
// hosts can reach, unless the operator says so, as Mosquitto 2 does: an
// open bus lets any peer act as any clientId.
func checkOpenBus(listen string, hasAuth, allowAnonymous bool) error {
	if hasAuth || allowAnonymous || isLoopback(listen) {
		return nil
	}
	return fmt.Errorf("refusing to listen on %s without auth: any peer that reaches it could act as any clientId; "+
		"add an auth: section to the --config file (docs/SECURITY.md), or pass --allow-anonymous to run an open bus on purpose", listen)
}

// isLoopback reports whether a listen address only accepts connections
// from this host: 127.0.0.0/8, ::1 or localhost. An empty host, 0.0.0.0
// and :: listen everywhere; any other name may resolve anywhere.
func isLoopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		host = listen
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
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

// journalOptions are the journal's options from --journal and the
// --journal-* flags.
func (c *serveConfig) journalOptions() *journal.Options {
	o := c.journalOpts
	o.Off = !c.journal
	return &o
}

// toolSubscriptions is the tool subscriptions' add-on, keeping them in
// db, or on a cluster (cl not nil) in the node's cluster store.
func toolSubscriptions(cfg *serveConfig, db *store.Store, cl bus.Cluster) bus.Extension {
	o := toolsub.Options{
		MaxPerThread: cfg.toolSubsPerThread,
		Max:          cfg.toolSubsMax,
		EventRate:    cfg.toolEventRate,
		EventBurst:   cfg.toolEventBurst,
	}
	// Built as the bus starts: a cluster node's store exists once the
	// node joined.
	return bus.ExtensionFunc(func(s *bus.Server) error {
		o.Store = db
		if cl != nil {
			cs := cluster.StoreOf(cl)
			if cs == nil {
				return errors.New("tool subscriptions: the cluster has no store yet")
			}
			o.Store = cs
		}
		return toolsub.New(&o).Extend(s)
	})
}
