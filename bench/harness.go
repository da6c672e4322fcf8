package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Scenario parameters, from issue 6.
var (
	relaySizes    = []int{100, 1 << 10, 64 << 10}
	relayInFlight = []int{1, 16, 64}
	fanoutSizes   = []int{100, 1000}
)

// The fan-out scenario's payload size, and the messages in flight of its
// throughput run (its latency run has one).
const (
	fanoutPayload  = 1 << 10
	fanoutInFlight = 4
)

// harness runs the scenarios and collects the results.
type harness struct {
	cfg     config
	tmp     string
	bub     string
	systems []system // bus first: ratios are bus over the others
	procs   []*process
	res     results
}

func newHarness(cfg config) (*harness, error) {
	tmp, err := os.MkdirTemp("", "bub-bench-")
	if err != nil {
		return nil, fmt.Errorf("make a temp dir: %w", err)
	}
	return &harness{cfg: cfg, tmp: tmp}, nil
}

// scenario is one of the harness's scenarios, by its -only name.
type scenario struct {
	name string
	run  func() error
}

func (h *harness) runScenario(sc scenario) error {
	if !h.want(sc.name) {
		return nil
	}
	return sc.run()
}

func (h *harness) want(scenario string) bool {
	return h.cfg.only == "" || slices.Contains(strings.Split(h.cfg.only, ","), scenario)
}

func (h *harness) run() error {
	if h.cfg.profile != "" {
		return h.profileBus()
	}
	h.res.Machine = describeMachine(h.cfg)
	if err := h.buildBub(); err != nil {
		return err
	}
	log.Printf("%s, %d CPUs, %s", h.res.Machine.CPU, h.res.Machine.CPUs, h.res.Machine.Go)
	// The first five share one bus and one process of each baseline (the
	// cluster scenario adds a cluster next to that bus); the others start
	// what they need.
	shared := []scenario{{"relay", h.relay}, {"latency", h.latency}, {"fanout", h.fanout}, {"sdk", h.sdk}, {"cluster", h.cluster}}
	alone := []scenario{{"retries", h.retries}, {"held", h.held}, {"journal", h.journal}, {"spawn", h.spawn}, {"wake", h.wake}, {"idle", h.idle}, {"route", h.route}}
	if slices.ContainsFunc(shared, func(sc scenario) bool { return h.want(sc.name) }) {
		if err := h.startSystems(); err != nil {
			return err
		}
	}
	for _, sc := range shared {
		if err := h.runScenario(sc); err != nil {
			return err
		}
	}
	h.stopAll()
	for _, sc := range alone {
		if err := h.runScenario(sc); err != nil {
			return err
		}
	}
	h.res.Targets = evaluateTargets(&h.res)
	printReport(os.Stdout, &h.res)
	return h.writeJSON()
}

// buildBub builds bub from the repository root into the temp dir, unless
// -bub names a binary.
func (h *harness) buildBub() error {
	if h.cfg.bub != "" {
		h.bub = h.cfg.bub
		return nil
	}
	h.bub = filepath.Join(h.tmp, "bub")
	cmd := exec.Command("go", "build", "-o", h.bub, "./cmd/bub")
	cmd.Dir = h.cfg.root
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	log.Printf("building bub from %s", h.cfg.root)
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("build bub in %s: %w", h.cfg.root, err)
	}
	return nil
}

// startSystems starts bub serve and every baseline: the raw relay, NATS
// over TCP and over WebSocket, and Centrifuge.
func (h *harness) startSystems() error {
	bus, err := startBub(h.bub, h.tmp)
	if err != nil {
		return err
	}
	h.procs = append(h.procs, bus)
	h.systems = []system{&busSystem{proc: bus}}
	for _, b := range baselines {
		p, err := startRole(b.role)
		if err != nil {
			return err
		}
		h.procs = append(h.procs, p)
		h.systems = append(h.systems, b.system(p))
	}
	return nil
}

// baseline is a system the bus is measured against, served by this binary
// started again with -role.
type baseline struct {
	name   string // the system's name()
	role   string
	system func(*process) idler
}

// baselines are the bus's baselines, in the order of the report's columns.
var baselines = []baseline{
	{"raw", "relay", func(p *process) idler { return &rawSystem{p} }},
	{"nats", "nats", func(p *process) idler { return &natsSystem{proc: p} }},
	{"nats-ws", "nats-ws", func(p *process) idler { return &natsSystem{proc: p, ws: true} }},
	{"centrifuge", "centrifuge", func(p *process) idler { return &centrifugeSystem{p} }},
}

// close stops the servers and removes the temp dir, with the stores and
// workspaces the scenarios left in it.
func (h *harness) close() {
	h.stopAll()
	if err := os.RemoveAll(h.tmp); err != nil {
		log.Printf("warning: remove %s: %v", h.tmp, err)
	}
}

func (h *harness) stopAll() {
	for _, p := range h.procs {
		p.stop()
	}
	h.procs = nil
	h.systems = nil
}

// rounds runs measure for every one of systems, h.cfg.rounds times,
// starting each round with the next system so that no system always runs
// first, and returns the runs per system in round order.
func (h *harness) rounds(systems []system, measure func(system) (stats, error)) (map[string][]stats, error) {
	runs := make(map[string][]stats)
	for r := range h.cfg.rounds {
		for i := range systems {
			sys := systems[(i+r)%len(systems)]
			s, err := measure(sys)
			if err != nil {
				return nil, err
			}
			runs[sys.name()] = append(runs[sys.name()], s)
		}
	}
	return runs, nil
}

// relayRuns measures the closed-loop relay of size-byte payloads with
// window messages in flight on every one of systems, round by round.
func (h *harness) relayRuns(systems []system, size, window int) (map[string][]stats, error) {
	return h.rounds(systems, func(sys system) (stats, error) {
		ss, err := openSession(sys, 1, size)
		if err != nil {
			return stats{}, err
		}
		defer ss.close()
		return closedLoop(ss, window, h.cfg.warmup, h.cfg.runFor)
	})
}

func (h *harness) relay() error {
	for _, size := range relaySizes {
		for _, window := range relayInFlight {
			runs, err := h.relayRuns(h.systems, size, window)
			if err != nil {
				return fmt.Errorf("relay %s, %d in flight: %w", sizeName(size), window, err)
			}
			c := newCell(fmt.Sprintf("relay %s ×%d", sizeName(size), window), runs, higherIsBetter)
			c.Payload, c.InFlight, c.Subscribers = size, window, 1
			h.res.Relay = append(h.res.Relay, c)
			log.Print(c.summary())
		}
	}
	return nil
}

// relayCase is one relay: payload size and messages in flight.
type relayCase struct{ size, window int }

// sdkCases are the relays run through the Go SDK.
var sdkCases = []relayCase{{1 << 10, 1}, {1 << 10, 64}, {64 << 10, 64}}

// sdk runs relays through the Go SDK next to the same relays through the
// lean clients, against the same bus process.
func (h *harness) sdk() error {
	systems := []system{h.systems[0], &sdkSystem{h.systems[0].server()}}
	for _, sc := range sdkCases {
		runs, err := h.relayRuns(systems, sc.size, sc.window)
		if err != nil {
			return fmt.Errorf("Go SDK relay %s, %d in flight: %w", sizeName(sc.size), sc.window, err)
		}
		c := newCell(fmt.Sprintf("relay %s ×%d", sizeName(sc.size), sc.window), runs, higherIsBetter)
		c.Payload, c.InFlight, c.Subscribers = sc.size, sc.window, 1
		h.res.SDK = append(h.res.SDK, c)
		log.Printf("%s via the SDK: %.0f/s, p99 %s, %.1f µs client CPU per relay; lean: %.0f/s, %.1f µs; sdk/lean %.2f",
			c.Name, c.Median["sdk"].Throughput, us(c.Median["sdk"].P99), c.Median["sdk"].ClientCPUPerMsg,
			c.Median["bus"].Throughput, c.Median["bus"].ClientCPUPerMsg, c.SDKVsLean.Throughput)
	}
	return nil
}

// latencyLoad is the open-loop rate as a share of the bus's closed-loop
// throughput at 64 in flight.
const latencyLoad = 0.5

func (h *harness) latency() error {
	for _, size := range relaySizes {
		rate := 2000.0
		for _, c := range h.res.Relay {
			if c.Payload == size && c.InFlight == 64 {
				rate = latencyLoad * c.Median["bus"].Throughput
			}
		}
		rate = max(rate, 100)
		runs, err := h.rounds(h.systems, func(sys system) (stats, error) {
			ss, err := openSession(sys, 1, size)
			if err != nil {
				return stats{}, err
			}
			defer ss.close()
			return openLoop(ss, rate, h.cfg.warmup, 2*h.cfg.runFor)
		})
		if err != nil {
			return fmt.Errorf("open-loop latency %s at %.0f/s: %w", sizeName(size), rate, err)
		}
		c := newCell(fmt.Sprintf("latency %s @%.0f/s", sizeName(size), rate), runs, lowerIsBetter)
		c.Payload, c.Subscribers, c.Rate = size, 1, rate
		h.res.Latency = append(h.res.Latency, c)
		log.Print(c.summary())
	}
	return nil
}

func (h *harness) fanout() error {
	for _, n := range fanoutSizes {
		var one, many map[string][]stats
		one, many = map[string][]stats{}, map[string][]stats{}
		_, err := h.rounds(h.systems, func(sys system) (stats, error) {
			ss, err := openSession(sys, n, fanoutPayload)
			if err != nil {
				return stats{}, err
			}
			defer ss.close()
			s1, err := closedLoop(ss, 1, h.cfg.warmup, 2*h.cfg.runFor)
			if err != nil {
				return stats{}, err
			}
			s16, err := closedLoop(ss, fanoutInFlight, h.cfg.warmup, 2*h.cfg.runFor)
			if err != nil {
				return stats{}, err
			}
			one[sys.name()] = append(one[sys.name()], s1)
			many[sys.name()] = append(many[sys.name()], s16)
			return s1, nil
		})
		if err != nil {
			return fmt.Errorf("fan-out to %d: %w", n, err)
		}
		c1 := newCell(fmt.Sprintf("fan-out %d ×1", n), one, lowerIsBetter)
		c1.Payload, c1.Subscribers, c1.InFlight = fanoutPayload, n, 1
		c16 := newCell(fmt.Sprintf("fan-out %d ×%d", n, fanoutInFlight), many, higherIsBetter)
		c16.Payload, c16.Subscribers, c16.InFlight = fanoutPayload, n, fanoutInFlight
		h.res.Fanout = append(h.res.Fanout, c1, c16)
		log.Print(c1.summary())
		log.Print(c16.summary())
	}
	return nil
}

// idle measures each server's resident memory per idle connection, each
// on a freshly started process.
func (h *harness) idle() error {
	var starts []func() (idler, error)
	wanted := func(name string) bool {
		return h.cfg.idleOnly == "" || slices.Contains(strings.Split(h.cfg.idleOnly, ","), name)
	}
	if wanted("bus") {
		starts = append(starts, func() (idler, error) { p, err := startBub(h.bub, h.tmp); return &busSystem{proc: p}, err })
	}
	for _, b := range baselines {
		if !wanted(b.name) {
			continue
		}
		starts = append(starts, func() (idler, error) {
			p, err := startRole(b.role)
			if err != nil {
				return nil, err
			}
			return b.system(p), nil
		})
	}
	for _, start := range starts {
		sys, err := start()
		if err != nil {
			return err
		}
		r, err := measureIdle(sys, h.cfg.idleConn)
		sys.server().stop()
		if err != nil {
			return err
		}
		h.res.Idle = append(h.res.Idle, r)
		log.Printf("idle %s: %d connections, %.1f KiB each", r.System, r.Connections, r.PerConnKiB)
	}
	return nil
}

// idleFileMargin is the open files the idle scenario leaves to everything
// but its connections, per process.
const idleFileMargin = 1024

// idleResult is the idle-connection scenario for one system.
type idleResult struct {
	System      string  `json:"system"`
	Wanted      int     `json:"wanted"`
	Connections int     `json:"connections"`
	RSSBefore   int64   `json:"rss_before_bytes"`
	RSSAfter    int64   `json:"rss_after_bytes"`
	PerConnKiB  float64 `json:"per_conn_kib"`
	// Go is where the memory went, per connection, for a server that
	// exports the Go collector's metrics (the bus).
	Go    *goMemory `json:"go,omitempty"`
	Error string    `json:"error,omitempty"`
}

// goMemory is the growth of a Go server's runtime figures per connection.
type goMemory struct {
	Goroutines   float64 `json:"goroutines"`
	StackKiB     float64 `json:"stack_kib"`
	HeapInuseKiB float64 `json:"heap_inuse_kib"`
}

func measureIdle(sys idler, n int) (idleResult, error) {
	r := idleResult{System: sys.name(), Wanted: n}
	// The client ends are in this process and the server ends in the
	// server's, which has the same limit: past it, accept and dial fail
	// and everything after them does too.
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && lim.Cur > idleFileMargin && uint64(n) > lim.Cur-idleFileMargin {
		n = int(lim.Cur - idleFileMargin)
		log.Printf("idle %s: %d connections wanted, but open files are limited to %d per process and the limit cannot be raised here: measuring %d", sys.name(), r.Wanted, lim.Cur, n)
	}
	time.Sleep(time.Second)
	before, err := sys.server().rss()
	if err != nil {
		return r, err
	}
	_, isBus := sys.(*busSystem)
	goFigures := []string{"go_goroutines", "go_memstats_stack_inuse_bytes", "go_memstats_heap_inuse_bytes"}
	var v0 []float64
	if isBus {
		if v0, err = busMetrics(sys.server(), goFigures...); err != nil {
			return r, err
		}
	}
	conns, err := parallel(n, sys.idle)
	defer closeAll(conns)
	if err != nil {
		r.Error = err.Error()
		log.Printf("idle %s: stopped opening connections: %v", sys.name(), err)
	}
	for _, c := range conns {
		if c != nil {
			r.Connections++
		}
	}
	time.Sleep(2 * time.Second)
	after, err := sys.server().rss()
	if err != nil {
		return r, err
	}
	r.RSSBefore, r.RSSAfter = before, after
	if r.Connections > 0 {
		n := float64(r.Connections)
		r.PerConnKiB = float64(after-before) / n / 1024
		if isBus {
			v1, err := busMetrics(sys.server(), goFigures...)
			if err != nil {
				return r, err
			}
			r.Go = &goMemory{Goroutines: (v1[0] - v0[0]) / n, StackKiB: (v1[1] - v0[1]) / n / 1024, HeapInuseKiB: (v1[2] - v0[2]) / n / 1024}
			log.Printf("idle %s: per connection %.2f goroutines, %.1f KiB of stack, %.1f KiB of heap in use", sys.name(), r.Go.Goroutines, r.Go.StackKiB, r.Go.HeapInuseKiB)
		}
	}
	return r, nil
}

// routeResult is one sub-benchmark of BenchmarkRoute.
type routeResult struct {
	Name    string  `json:"name"`
	NsPerOp float64 `json:"ns_per_op"`
}

var benchLine = regexp.MustCompile(`^(BenchmarkRoute/\S+?)(-\d+)?\s+\d+\s+([\d.]+) ns/op`)

// route runs the bus's in-package BenchmarkRoute: matching with 10 and
// 10,000 exact subscriptions, and 10,000 mixed ones.
func (h *harness) route() error {
	cmd := exec.Command("go", "test", "-run", "^$", "-bench", "^BenchmarkRoute$", "-benchtime", "300ms", "-count", "1", "./bus")
	cmd.Dir = h.cfg.root
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("go test -bench BenchmarkRoute ./bus in %s: %w\n%s", h.cfg.root, err, out)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if m := benchLine.FindStringSubmatch(sc.Text()); m != nil {
			ns, _ := strconv.ParseFloat(m[3], 64)
			h.res.Route = append(h.res.Route, routeResult{Name: strings.TrimPrefix(m[1], "BenchmarkRoute/"), NsPerOp: ns})
		}
	}
	if len(h.res.Route) == 0 {
		return fmt.Errorf("BenchmarkRoute printed no results:\n%s", out)
	}
	return nil
}

func (h *harness) writeJSON() error {
	if h.cfg.out == "" {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(h.cfg.out), 0o755); err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	data, err := json.MarshalIndent(&h.res, "", "  ")
	if err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	if err := os.WriteFile(h.cfg.out, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	log.Printf("wrote %s", h.cfg.out)
	return nil
}

// profileBus profiles the bus (in a bus-pprof process) under relay load:
// 1 KiB payloads, -profile-window in flight (64, the target scenario);
// with -only retries, under the stored-retries load instead; with -only
// fanout, under the fan-out of 1 KiB to 1,000 subscribers at 1 in
// flight; with -only cluster, every node of a cluster of three
// (bus-pprof processes with -node-id) under the cross-node relay, the
// publisher on node a and the subscriber on node b, each node's profiles
// in a folder of DIR named for it.
// Besides the CPU and allocation profiles it saves the block and mutex
// profiles of the same run (the bus-pprof process records every blocking
// event and mutex contention).
func (h *harness) profileBus() error {
	if err := os.MkdirAll(h.cfg.profile, 0o755); err != nil {
		return fmt.Errorf("profile: %w", err)
	}
	var sys *busSystem
	dirs := map[*process]string{}
	if h.cfg.only == "cluster" {
		nodes, err := startNodes(clusterNodes, func(id, listen, routes string) (*process, error) {
			return startRole("bus-pprof", "-journal="+strconv.FormatBool(h.cfg.journal), "-node-id", id, "-nats-listen", listen, "-nats-routes", routes)
		})
		if err != nil {
			return err
		}
		for i, p := range nodes {
			p.name = "node " + string(rune('a'+i))
			dirs[p] = filepath.Join(h.cfg.profile, string(rune('a'+i)))
		}
		h.procs = append(h.procs, nodes...)
		sys = &busSystem{proc: nodes[0], sub: nodes[1], nodes: nodes}
	} else {
		p, err := startRole("bus-pprof", "-journal="+strconv.FormatBool(h.cfg.journal))
		if err != nil {
			return err
		}
		h.procs = append(h.procs, p)
		dirs[p] = h.cfg.profile
		sys = &busSystem{proc: p}
	}
	subs, window, what := 1, h.cfg.profileWindow, "relays"
	switch h.cfg.only {
	case "retries":
		sys.answer, sys.expect = retryAnswer, retryExpect
	case "fanout":
		subs, window, what = fanoutSizes[len(fanoutSizes)-1], 1, "fan-outs"
	}
	ss, err := openSession(sys, subs, 1<<10)
	if err != nil {
		return err
	}
	defer ss.close()
	const seconds = 8
	type fetched struct {
		data []byte
		err  error
	}
	cpu := map[*process]chan fetched{}
	before := map[*process]time.Duration{}
	syscalls := map[*process]int64{}
	for p := range dirs {
		cpu[p] = make(chan fetched, 1)
		go func() {
			time.Sleep(time.Second)
			data, err := fetch(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", p.addr, seconds))
			cpu[p] <- fetched{data, err}
		}()
		before[p], _ = p.cpuTime()
		syscalls[p] = syscallsOf(p.pid())
	}
	s, err := closedLoop(ss, window, time.Second, (seconds+1)*time.Second)
	if err != nil {
		return err
	}
	log.Printf("under profile: %.0f %s/s at %d in flight, p50 %.0f µs, p99 %.0f µs, %.1f µs server CPU per message", s.Throughput, what, window, s.P50, s.P99, s.ServerCPUPerMsg)
	if len(dirs) > 1 {
		for _, p := range sys.nodes {
			after, _ := p.cpuTime()
			// Over the whole run, warm-up included, like ServerCPUPerMsg.
			log.Printf("%s: %.1f µs CPU and %.1f read and write system calls per message", p.name,
				float64((after-before[p]).Microseconds())/float64(s.Messages), float64(syscallsOf(p.pid())-syscalls[p])/float64(s.Messages))
		}
	}
	if h.cfg.only == "retries" {
		if err := logRecordsPerCommit(sys.proc); err != nil {
			return err
		}
	}
	for p, dir := range dirs {
		f := <-cpu[p]
		if f.err != nil {
			return f.err
		}
		profiles := map[string][]byte{"cpu.pprof": f.data}
		for _, name := range []string{"allocs", "block", "mutex"} {
			data, err := fetch("http://" + p.addr + "/debug/pprof/" + name)
			if err != nil {
				return err
			}
			profiles[name+".pprof"] = data
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("profile: %w", err)
		}
		for name, data := range profiles {
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
				return fmt.Errorf("profile: %w", err)
			}
		}
		log.Printf("wrote %s/cpu.pprof, allocs.pprof, block.pprof and mutex.pprof; read them with go tool pprof -top", dir)
	}
	return nil
}

func fetch(url string) ([]byte, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, fmt.Errorf("fetch %s: %w", url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetch %s: status %s: %v", url, resp.Status, err)
	}
	return data, nil
}

// machine records where and when the numbers were taken.
type machine struct {
	Date   string `json:"date"`
	CPU    string `json:"cpu"`
	CPUs   int    `json:"cpus"`
	Memory string `json:"memory"`
	Kernel string `json:"kernel"`
	Go     string `json:"go"`
	Commit string `json:"commit,omitempty"`
	Rounds int    `json:"rounds"`
	RunFor string `json:"run_duration"`
	Quick  bool   `json:"quick,omitempty"`
}

func describeMachine(cfg config) machine {
	m := machine{
		Date:   time.Now().UTC().Format(time.RFC3339),
		CPUs:   runtime.NumCPU(),
		Go:     runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH,
		Rounds: cfg.rounds,
		RunFor: cfg.runFor.String(),
		Quick:  cfg.quick,
	}
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(data)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		if line, _, ok := strings.Cut(string(data), "\n"); ok {
			m.Memory = strings.Join(strings.Fields(strings.TrimPrefix(line, "MemTotal:")), " ")
		}
	}
	if data, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(data))
	}
	if out, err := exec.Command("git", "-C", cfg.root, "rev-parse", "--short", "HEAD").Output(); err == nil {
		m.Commit = strings.TrimSpace(string(out))
		// Numbers from uncommitted code must not pass for the commit's.
		if st, err := exec.Command("git", "-C", cfg.root, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
			m.Commit += "+dirty"
		}
	}
	return m
}

func sizeName(n int) string {
	if n >= 1<<10 {
		return strconv.Itoa(n>>10) + " KiB"
	}
	return strconv.Itoa(n) + " B"
}
