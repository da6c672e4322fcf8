package main

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/bub-bus/bub/auth"
	"github.com/bub-bus/bub/peer"
	"github.com/bub-bus/bub/spawner"
)

func init() {
	register("spawner", "start an agent for each new conversation (the default handler)", runSpawner)
}

// spawnerConfig is bub spawner's flags.
type spawnerConfig struct {
	busURL          string
	clientID        string
	command         string
	patterns        string
	workspaceRoot   string
	spawnTimeout    time.Duration
	maxAgents       int
	idleTimeout     time.Duration
	dataDir         string
	metricsListen   string
	restartDelay    time.Duration
	restartDelayMax time.Duration
	maxRestarts     int
	stopTimeout     time.Duration
	logLevel        string
	logFormat       string
	cred            credentialFlags
	issuerKey       string
	issuerName      string
	agentTokenTTL   time.Duration
	agentPublish    string
	agentDurable    bool
	agentSubscribe  string
}

func runSpawner(ctx context.Context, io stdio, args []string) int {
	var cfg spawnerConfig
	fs := newFlagSet(io, "spawner", "spawner --command 'PROGRAM [ARGS]' [flags]\n\n"+
		"Serves --patterns as the bus's fallback: a message on a topic no agent subscribes to\n"+
		"starts PROGRAM with BUB_BUS_URL, BUB_AGENT_ID, BUB_DEFAULT_TOPIC (the topic) and\n"+
		"BUB_WORKSPACE set; once the agent has subscribed to the topic, the bus delivers it the\n"+
		"message. PROGRAM runs directly, not through a shell: --command is split into words at\n"+
		"spaces, with '...', \"...\" and \\ quoting as in a shell, and nothing else ($VAR, *, |)\n"+
		"is special. Pass secrets in the environment, which agents inherit, never in --command.\n"+
		"Agents run in their workspace, so a relative path in an argument is looked up there and\n"+
		"fails: write --command \"python3 $PWD/agent.py\", not \"python3 agent.py\" (the program\n"+
		"itself is resolved when the spawner starts, so bin/echo-agent works).\n"+
		"An agent with no delivery for --idle-timeout, or the least recently used idle one when\n"+
		"--max-agents are running and a new conversation needs a place, is hibernated: stopped,\n"+
		"its workspace and agent id kept (in --data-dir) for the next message, which wakes it.\n"+
		"Agent lifecycle events go to system:agent.{spawned,ready,exited,spawn_failed,hibernated,woken}.")
	fs.StringVar(&cfg.busURL, "bus-url", peer.DefaultBusURL, busURLUsage+"; agents get it, the whole list, as BUB_BUS_URL")
	fs.StringVar(&cfg.clientID, "client-id", "spawner", "clientId of the spawner; a second spawner with the same id takes over from the first")
	fs.StringVar(&cfg.command, "command", "", "the agent program and its arguments (required), e.g. 'bin/echo-agent' or \"python3 $PWD/agent.py --verbose\"; paths in arguments in full (see above)")
	fs.StringVar(&cfg.patterns, "patterns", strings.Join(spawner.DefaultPatterns(), ","), "comma-separated topic patterns to serve as the fallback")
	fs.StringVar(&cfg.workspaceRoot, "workspace-root", "./workspaces", "directory holding one workspace directory per topic; created if missing")
	fs.DurationVar(&cfg.spawnTimeout, "spawn-timeout", 20*time.Second, "how long a new agent has to subscribe to its topic; keep it below the bus's --delivery-timeout")
	fs.IntVar(&cfg.maxAgents, "max-agents", 64, "agent processes at once; a conversation needing one more hibernates the least recently used idle agent, or waits for one to finish its delivery")
	fs.DurationVar(&cfg.idleTimeout, "idle-timeout", 10*time.Minute, "hibernate an agent after this long without a delivery (0: never); the next message wakes it with the same id and workspace")
	fs.StringVar(&cfg.dataDir, "data-dir", "", "directory keeping each topic's agent id across restarts (default: .spawner in --workspace-root)")
	fs.StringVar(&cfg.metricsListen, "metrics-listen", "", "address to serve the spawner's Prometheus /metrics on, e.g. 127.0.0.1:9101 (default: none)")
	fs.DurationVar(&cfg.restartDelay, "restart-delay", time.Second, "crash-loop backoff: the wait after the second failure in a row of a topic's agent, doubling after each further one")
	fs.DurationVar(&cfg.restartDelayMax, "restart-delay-max", time.Minute, "longest crash-loop backoff; an agent that ran this long counts as healthy")
	fs.IntVar(&cfg.maxRestarts, "max-restarts", 5, "crashes in a row after which an agent is no longer restarted until a new message")
	fs.DurationVar(&cfg.stopTimeout, "stop-timeout", 5*time.Second, "how long an agent has to exit after SIGTERM (on hibernation or shutdown) before it gets SIGKILL")
	fs.StringVar(&cfg.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&cfg.logFormat, "log-format", "text", "text or json")
	cfg.cred.addFlags(fs)
	fs.StringVar(&cfg.issuerKey, "issuer-key", "", "Ed25519 private key (bub auth keygen) to mint each agent a credential of its own, passed as BUB_TOKEN; the bus's config lists the matching public key as an issuer")
	fs.StringVar(&cfg.issuerName, "issuer-name", "spawner", "the issuer name the bus's config gives that key")
	fs.DurationVar(&cfg.agentTokenTTL, "agent-token-ttl", 24*time.Hour, "how long an agent's credential is valid; it must outlive the agent, which reconnects with it")
	fs.StringVar(&cfg.agentPublish, "agent-publish", strings.Join(spawner.DefaultAgentPublish.Allow, ","), "comma-separated topics an agent may publish to; {{clientId}} is the agent's id, {{topic}} the topic it was started for, {{chat}} that topic after its first ':'")
	fs.BoolVar(&cfg.agentDurable, "agent-durable", false, "let agents hold durable subscriptions, kept while they are hibernated and waking them (the issuer's ceiling must allow durable too)")
	fs.StringVar(&cfg.agentSubscribe, "agent-subscribe", strings.Join(spawner.DefaultAgentSubscribe.Allow, ","), "comma-separated patterns an agent may subscribe to, with the same placeholders")
	// Every flag of the daemon is a deployment's setting. Those whose
	// BUB_<FLAG> would not say whose setting it is are named for the
	// spawner: BUB_CLIENT_ID or BUB_COMMAND could be anybody's.
	bindEnvAs(fs, "client-id", "BUB_SPAWNER_CLIENT_ID")
	bindEnvAs(fs, "command", "BUB_SPAWNER_COMMAND")
	bindEnvAs(fs, "patterns", "BUB_SPAWNER_PATTERNS")
	bindEnvAs(fs, "data-dir", "BUB_SPAWNER_DATA_DIR")
	bindEnvAs(fs, "metrics-listen", "BUB_SPAWNER_METRICS_LISTEN")
	bindAllEnv(fs)
	if code, ok := parseFlags(fs, io, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return usagef(io, "spawner", "unexpected argument %q (put the agent's arguments in --command)", fs.Arg(0))
	}
	if cfg.command == "" {
		return usagef(io, "spawner", "no agent: pass --command")
	}
	if cfg.idleTimeout < 0 {
		return usagef(io, "spawner", "--idle-timeout %s is negative (0 never hibernates an idle agent)", cfg.idleTimeout)
	}
	idleTimeout := cfg.idleTimeout
	if idleTimeout == 0 {
		idleTimeout = -1 // spawner.Options: never
	}
	if err := checkBusURL(cfg.busURL); err != nil {
		return usagef(io, "spawner", "%v", err)
	}
	command, err := spawner.SplitCommand(cfg.command)
	if err != nil {
		return usagef(io, "spawner", "--command: %v", err)
	}
	patterns := splitList(cfg.patterns)
	if len(patterns) == 0 {
		return usagef(io, "spawner", "--patterns is empty")
	}
	logger, err := newLogger(io, cfg.logLevel, cfg.logFormat)
	if err != nil {
		return usagef(io, "spawner", "%v", err)
	}
	// Agents inherit the environment, less the spawner's own settings:
	// an agent that runs bub must not pick up --patterns or --command.
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		isFlag := false
		fs.VisitAll(func(f *flag.Flag) { isFlag = isFlag || envOf(f) == name })
		if !isFlag {
			env = append(env, kv)
		}
	}
	token, err := cfg.cred.resolve()
	if err != nil {
		return usagef(io, "spawner", "%v", err)
	}
	var issuer *spawner.Issuer
	if cfg.issuerKey != "" {
		key, err := auth.LoadPrivateKey(cfg.issuerKey)
		if err != nil {
			return usagef(io, "spawner", "--issuer-key: %v", err)
		}
		issuer = &spawner.Issuer{
			Name: cfg.issuerName, Key: key, TTL: cfg.agentTokenTTL,
			Publish:   auth.Rules{Allow: splitList(cfg.agentPublish)},
			Subscribe: auth.Rules{Allow: splitList(cfg.agentSubscribe)},
			Durable:   cfg.agentDurable,
		}
	}
	sp, err := spawner.New(&spawner.Options{
		Token:           token,
		Issuer:          issuer,
		BusURL:          cfg.busURL,
		ClientID:        cfg.clientID,
		Patterns:        patterns,
		Command:         command,
		WorkspaceRoot:   cfg.workspaceRoot,
		Env:             env,
		SpawnTimeout:    cfg.spawnTimeout,
		MaxAgents:       cfg.maxAgents,
		IdleTimeout:     idleTimeout,
		DataDir:         cfg.dataDir,
		RestartDelay:    cfg.restartDelay,
		RestartDelayMax: cfg.restartDelayMax,
		MaxRestarts:     cfg.maxRestarts,
		StopTimeout:     cfg.stopTimeout,
		Logger:          logger,
	})
	if err != nil {
		return errorf(io, "%v", err)
	}
	if cfg.metricsListen != "" {
		stop, err := serveMetrics(cfg.metricsListen, promhttp.HandlerFor(sp.Registry(), promhttp.HandlerOpts{}), logger)
		if err != nil {
			return errorf(io, "--metrics-listen %s: %v", cfg.metricsListen, err)
		}
		defer stop()
	}
	if err := sp.Run(ctx); err != nil {
		return errorf(io, "%v", dialHint(err, cfg.busURL))
	}
	logger.Info("spawner stopped")
	return 0
}

// serveMetrics serves metrics on http://addr/metrics until stop is
// called.
func serveMetrics(addr string, metrics http.Handler, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server", "addr", addr, "err", err)
		}
	}()
	log.Info("serving metrics", "addr", ln.Addr().String())
	return func() { _ = srv.Close() }, nil
}
