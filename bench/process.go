package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// process is a server the harness started and owns.
type process struct {
	name string
	cmd  *exec.Cmd
	addr string // host:port it serves on
}

// busLimits lift the bus's limits that would refuse the harness's own
// load: every connection comes from 127.0.0.1 (the idle scenario opens
// 10,000 and more), the fan-out's patterns carry up to 12 '?', and the
// stored-retries runs leave more than 10,000 retries, over 64 MiB in a
// run of a few seconds, pending from one publisher. Every other flag stays at its default.
var busLimits = []string{
	"--max-connections", "-1",
	"--max-connections-per-addr", "-1",
	"--max-pattern-wildcards", strconv.Itoa(len(fanoutTail)),
	"--max-pending", "-1",
	"--max-pending-per-identity", "-1",
	"--max-stored-bytes-per-identity", "-1",
}

// startBub starts `bub serve` on a free loopback port with its data in a
// fresh directory under tmp, with flags added to the harness's own.
func startBub(bin, tmp string, flags ...string) (*process, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, fmt.Errorf("start bub serve: %w", err)
	}
	dataDir, err := os.MkdirTemp(tmp, "data-")
	if err != nil {
		return nil, fmt.Errorf("start bub serve: %w", err)
	}
	args := slices.Concat([]string{"serve", "--listen", addr, "--data-dir", dataDir, "--log-level", "warn"}, busLimits, flags)
	p, err := startProcess("bub serve", exec.Command(bin, args...))
	if err != nil {
		return nil, err
	}
	p.addr = addr
	if err := waitReady("http://" + addr + "/readyz"); err != nil {
		p.stop()
		return nil, fmt.Errorf("bub serve on %s: %w", addr, err)
	}
	return p, nil
}

// startCluster starts n `bub serve` nodes of one cluster on loopback,
// named a, b, c..., each routing to all the others. They start at once:
// each waits for a JetStream quorum of the others before it serves.
func startCluster(bin, tmp string, n int) ([]*process, error) {
	return startNodes(n, func(id, listen, routes string) (*process, error) {
		return startBub(bin, tmp, "--cluster-name", "bench", "--node-id", id, "--nats-listen", listen, "--nats-routes", routes)
	})
}

// startNodes starts n nodes of one cluster on loopback with start, which
// is given each node's id (a, b, c...), its route address and the others'
// route URLs, comma-separated. They start at once: each waits for a
// JetStream quorum of the others before it serves.
func startNodes(n int, start func(id, listen, routes string) (*process, error)) ([]*process, error) {
	routes := make([]string, n)
	for i := range routes {
		addr, err := freeAddr()
		if err != nil {
			return nil, fmt.Errorf("start a cluster of %d: %w", n, err)
		}
		routes[i] = "nats://" + addr
	}
	nodes := make([]*process, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		others := slices.Delete(slices.Clone(routes), i, i+1)
		wg.Go(func() {
			id := string(rune('a' + i))
			nodes[i], errs[i] = start(id, strings.TrimPrefix(routes[i], "nats://"), strings.Join(others, ","))
			if errs[i] != nil {
				errs[i] = fmt.Errorf("node %s: %w", id, errs[i])
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		stopNodes(nodes)
		return nil, fmt.Errorf("start a cluster of %d: %w", n, err)
	}
	return nodes, nil
}

// stopNodes stops a cluster's nodes one after another, so that all but
// the last leave with a quorum (the last one's leave is bounded).
func stopNodes(nodes []*process) {
	for _, p := range nodes {
		p.stop()
	}
}

// startProcess starts cmd with its output on the harness's stderr, to be
// killed if the harness dies.
func startProcess(name string, cmd *exec.Cmd) (*process, error) {
	cmd.Stdout = os.Stderr
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s (%s): %w", name, cmd.Path, err)
	}
	return &process{name: name, cmd: cmd}, nil
}

// startRole starts this binary again as a server process of the given
// role, with args added, which prints "listening ADDR" once it serves.
func startRole(role string, args ...string) (*process, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("start %s: find this binary: %w", role, err)
	}
	cmd := exec.Command(self, slices.Concat([]string{"-role", role, "-listen", "127.0.0.1:0"}, args)...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", role, err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", role, err)
	}
	p := &process{name: role, cmd: cmd}
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			line <- sc.Text()
		}
		close(line)
		for sc.Scan() {
		}
	}()
	select {
	case l, ok := <-line:
		addr, found := strings.CutPrefix(l, "listening ")
		if !ok || !found {
			p.stop()
			return nil, fmt.Errorf("start %s: expected \"listening ADDR\", got %q", role, l)
		}
		p.addr = addr
	case <-time.After(readyLimit):
		// A cluster node (bus-pprof with -node-id) serves once its
		// JetStream has a quorum.
		p.stop()
		return nil, fmt.Errorf("start %s: not listening after %s", role, readyLimit)
	}
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

// rss returns the process's resident memory in bytes (VmRSS).
func (p *process) rss() (int64, error) {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p.pid()), "status"))
	if err != nil {
		return 0, fmt.Errorf("rss of %s: %w", p.name, err)
	}
	for line := range bytes.Lines(data) {
		if rest, ok := bytes.CutPrefix(line, []byte("VmRSS:")); ok {
			f := strings.Fields(string(rest))
			if len(f) != 2 || f[1] != "kB" {
				return 0, fmt.Errorf("rss of %s: unexpected VmRSS line %q", p.name, line)
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("rss of %s: %w", p.name, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("rss of %s: no VmRSS in /proc/%d/status", p.name, p.pid())
}

// cpuTime returns the user+system CPU time the process has used so far.
func (p *process) cpuTime() (time.Duration, error) { return cpuTimeOf(p.pid(), p.name) }

// cpuTimeOf returns the user+system CPU time process pid has used so far,
// its live and its exited threads'.
func cpuTimeOf(pid int, name string) (time.Duration, error) {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, fmt.Errorf("cpu time of %s: %w", name, err)
	}
	// Fields after the command name, which is in parentheses and may
	// hold spaces: utime and stime are fields 14 and 15 of the line.
	i := bytes.LastIndexByte(data, ')')
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("cpu time of %s: short /proc stat line", name)
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	const ticks = 100 // USER_HZ on Linux
	return time.Duration(ut+st) * time.Second / ticks, nil
}

// syscallsOf returns the read and write system calls process pid has
// made so far (syscr+syscw of /proc/PID/io), or 0 when it cannot tell.
func syscallsOf(pid int) int64 {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "io"))
	if err != nil {
		return 0
	}
	var n int64
	for line := range strings.Lines(string(data)) {
		name, value, _ := strings.Cut(strings.TrimSpace(line), ": ")
		if name == "syscr" || name == "syscw" {
			v, _ := strconv.ParseInt(value, 10, 64)
			n += v
		}
	}
	return n
}

// stop kills the process and waits for it.
func (p *process) stop() {
	if p == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}

// freeAddr returns a loopback address with a port free right now.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr, nil
}

// readyLimit bounds the wait for a server to answer /readyz. A single
// bus is ready in milliseconds; a cluster node only once its JetStream
// has a quorum, about 6 s after a cluster of three starts on loopback.
const readyLimit = time.Minute

// waitReady polls url until it answers 200.
func waitReady(url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), readyLimit)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready after %s: %v", readyLimit, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
