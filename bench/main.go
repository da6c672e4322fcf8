// Command bench measures the bus side by side with the physical limit,
// with NATS (over TCP and over WebSocket) and with Centrifuge, on one
// machine in one run (docs/BENCHMARKS.md).
//
// It builds and starts the real `bub serve` binary, a minimal raw
// WebSocket relay, an embedded nats-server with a TCP listener, another
// with a WebSocket listener, and a Centrifuge server, each as a process of
// its own, and drives them all from this process over loopback. The
// baselines' servers are this same binary started again with -role. The
// durable and spawn scenarios run the bus alone, on a fresh store, and the
// spawn scenario adds `bub spawner` with bench/agent as its agent; the
// wake scenario adds `bub spawner` with examples/echo-agent, which it
// hibernates and wakes. The
// cluster scenario starts three `bub serve` nodes of one cluster and
// relays from one node to another.
//
// Usage, from bench/ (or `make bench` from the repository root):
//
//	go run . [-quick] [-out results/latest.json]
//	go run . -profile DIR   # CPU and allocation profiles of the bus under relay load
//	go run . -profile DIR -only retries   # ... under the stored-retries load
//	go run . -profile DIR -only fanout    # ... under the fan-out to 1,000 at 1 in flight
//	go run . -profile DIR -only cluster   # ... of each node of a cluster of three under the cross-node relay
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/bub-bus/bub/cluster"
)

// config holds the command's flags.
type config struct {
	role     string
	listen   string
	root     string
	bub      string
	out      string
	quick    bool
	rounds   int
	runFor   time.Duration
	warmup   time.Duration
	idleConn int
	idleOnly string
	held     int
	spawns   int
	// conversations is the wake scenario's many-conversations run.
	conversations int
	profile       string
	// profileWindow is the messages in flight of -profile's relay loads.
	profileWindow int
	only          string
	// node, for -role bus-pprof, makes the bus a node of a cluster.
	node clusterNodeFlags
	// journal runs the message journal in -profile's buses.
	journal bool
}

// clusterNodeFlags are a bus-pprof process's cluster settings, as
// bench's -profile DIR -only cluster passes them (bub serve's
// --node-id, --nats-listen and --nats-routes).
type clusterNodeFlags struct {
	id, listen, routes string
}

// options are the cluster options the flags describe, or nil for a
// single bus.
func (c clusterNodeFlags) options() *cluster.Options {
	if c.id == "" {
		return nil
	}
	return &cluster.Options{Name: "bench", NodeID: c.id, ClusterListen: c.listen, Routes: strings.Split(c.routes, ",")}
}

func main() {
	var cfg config
	flag.StringVar(&cfg.role, "role", "", "internal: run as a server process (relay, nats, nats-ws, centrifuge or bus-pprof) instead of the harness")
	flag.StringVar(&cfg.listen, "listen", "127.0.0.1:0", "internal: the address a -role process listens on")
	flag.BoolVar(&cfg.journal, "journal", true, "run the message journal in -profile's buses, as bub serve does unless --journal=false")
	flag.StringVar(&cfg.node.id, "node-id", "", "internal: with -role bus-pprof, run a node of a cluster with this id")
	flag.StringVar(&cfg.node.listen, "nats-listen", "", "internal: with -node-id, the node's cluster (route) address")
	flag.StringVar(&cfg.node.routes, "nats-routes", "", "internal: with -node-id, the other nodes' route URLs, comma-separated")
	flag.StringVar(&cfg.root, "root", "..", "the repository root, where ./cmd/bub and ./bus live")
	flag.StringVar(&cfg.bub, "bub", "", "a prebuilt bub binary (default: build one from -root into a temp dir)")
	flag.StringVar(&cfg.out, "out", "results/latest.json", "where to write the results as JSON (empty: nowhere)")
	flag.BoolVar(&cfg.quick, "quick", false, "one round, shorter runs, 2,000 idle connections, 500 held messages, 5 spawns, 200 conversations: a smoke test, not numbers to publish")
	flag.IntVar(&cfg.rounds, "rounds", 2, "alternating rounds per scenario; ratios are the median of per-round ratios")
	flag.DurationVar(&cfg.runFor, "duration", time.Second, "measured time of one throughput run")
	flag.DurationVar(&cfg.warmup, "warmup", 300*time.Millisecond, "unmeasured time before each run")
	flag.IntVar(&cfg.idleConn, "idle", 10000, "connections in the idle-memory scenario; beyond 20,000 the harness spreads them over several 127.0.0.x source addresses and raises the open-file limit (raising the hard limit needs CAP_SYS_RESOURCE)")
	flag.StringVar(&cfg.idleOnly, "idle-systems", "", "measure only these systems in the idle scenario, comma-separated: bus, raw, nats, nats-ws, centrifuge (default all)")
	flag.IntVar(&cfg.held, "held", 5000, "messages held, then woken, in the held scenario")
	flag.IntVar(&cfg.spawns, "spawns", 20, "agents spawned, one after another, in the spawn scenario, and spawned then woken in the wake scenario")
	flag.IntVar(&cfg.conversations, "conversations", 1000, "new conversations sent at once through bub spawner --max-agents 16 in the wake scenario")
	flag.StringVar(&cfg.profile, "profile", "", "write CPU, allocation, block and mutex profiles of the bus under relay load (with -only retries: stored retries; with -only fanout: the fan-out to 1,000 at 1 in flight; with -only cluster: each node of a cluster of three under the cross-node relay, -profile-window in flight) into this directory, and do nothing else")
	flag.IntVar(&cfg.profileWindow, "profile-window", 64, "messages in flight under -profile's relay load and cross-node relay load")
	flag.StringVar(&cfg.only, "only", "", "run only these scenarios, comma-separated: relay, latency, fanout, sdk, cluster, retries, held, journal, spawn, wake, idle, route")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("bench: ")

	if cfg.role != "" {
		if err := runRole(cfg.role, cfg.listen, cfg.node.options(), cfg.journal); err != nil {
			log.Fatalf("role %s: %v", cfg.role, err)
		}
		return
	}
	if cfg.quick {
		cfg.rounds = 1
		cfg.runFor = 400 * time.Millisecond
		cfg.warmup = 100 * time.Millisecond
		cfg.idleConn = 2000
		cfg.held = 500
		cfg.spawns = 5
		cfg.conversations = 200
	}
	raiseFileLimit(uint64(2*cfg.idleConn + 4096))

	h, err := newHarness(cfg)
	if err != nil {
		log.Fatal(err)
	}
	// Children die with the harness, even on ^C.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		h.close()
		os.Exit(130)
	}()
	err = h.run()
	h.close()
	if err != nil {
		log.Fatal(err)
	}
}

// runRole runs this binary as one of the server processes.
func runRole(role, listen string, node *cluster.Options, withJournal bool) error {
	switch role {
	case "relay":
		return serveRelay(listen)
	case "nats":
		return serveNATS(listen, false)
	case "nats-ws":
		return serveNATS(listen, true)
	case "centrifuge":
		return serveCentrifuge(listen)
	case "bus-pprof":
		return serveBusWithPprof(listen, node, withJournal)
	}
	return fmt.Errorf("unknown role %q (want relay, nats, nats-ws, centrifuge or bus-pprof)", role)
}

// raiseFileLimit lifts the soft limit on open files to the hard limit,
// and the hard limit to want when it is lower and the process may
// (CAP_SYS_RESOURCE),
// for the idle-connection scenario, whose client ends are in this process
// and server ends in the server's; the server processes inherit it.
func raiseFileLimit(want uint64) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		log.Printf("warning: read the open-file limit: %v", err)
		return
	}
	if lim.Max < want {
		raised := syscall.Rlimit{Cur: want, Max: want}
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised); err == nil {
			return
		}
	}
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		log.Printf("warning: raise the open-file limit to %d: %v", lim.Max, err)
	}
	if lim.Max < want {
		log.Printf("warning: open files are limited to %d, fewer than the %d the idle scenario needs; it measures fewer (raising the hard limit needs CAP_SYS_RESOURCE)", lim.Max, want)
	}
}
