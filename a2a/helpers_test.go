package a2a_test

import (
	"bufio"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bub-bus/bub/a2a"
	"github.com/bub-bus/bub/a2a/a2atest"
	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/peer"
)

// fixture is a bus on loopback and an A2A server in front of it.
type fixture struct {
	bus  *bustest.Server
	srv  *a2a.Server
	http *httptest.Server
	opts a2a.Options
	// reg holds the server's metrics.
	reg *prometheus.Registry
}

// start starts a bus and an A2A server serving agents, with its task
// store in a fresh directory.
func start(t testing.TB, agents ...a2a.Agent) *fixture {
	t.Helper()
	return startOn(t, nil, agents...)
}

// startOn is start with the bus's options.
func startOn(t testing.TB, busOpts *bus.Options, agents ...a2a.Agent) *fixture {
	t.Helper()
	f := &fixture{bus: bustest.Start(t, busOpts)}
	f.opts = a2a.Options{
		BusURL: f.bus.URL,
		Agents: agents,
		Path:   filepath.Join(t.TempDir(), "a2a.db"),
		Logger: slog.New(slog.DiscardHandler),
	}
	f.open(t)
	return f
}

// open (re)starts the A2A server on the fixture's options.
func (f *fixture) open(t testing.TB) {
	t.Helper()
	// A fresh registry per server: a restarted one registers again.
	f.reg = prometheus.NewRegistry()
	f.opts.Registerer = f.reg
	srv, err := a2a.New(t.Context(), &f.opts)
	if err != nil {
		t.Fatal(err)
	}
	f.srv = srv
	f.http = httptest.NewServer(srv)
	t.Cleanup(f.close)
}

// close stops the HTTP side and the A2A server; twice is once.
func (f *fixture) close() {
	if f.srv == nil {
		return
	}
	f.http.CloseClientConnections()
	f.http.Close()
	f.srv.Close()
	f.srv = nil
}

// url is agent's JSON-RPC URL.
func (f *fixture) url(agent string) string { return f.http.URL + "/a2a/" + agent }

// startW starts a bus and an A2A server with agent "w" on agent:w, and
// an A2A-aware agent there.
func startW(t *testing.T) (*fixture, *a2atest.Agent) {
	t.Helper()
	f := start(t, a2a.Agent{Name: "w", Topic: "agent:w", ClientID: "a2a-gw"})
	return f, a2atest.StartAgent(t, f.bus.URL, "w", "", "agent:w")
}

// startEchoAgent runs examples/echo-agent as clientID on topic, as the
// spawner would.
func startEchoAgent(t *testing.T, busURL, clientID, topic string) {
	t.Helper()
	bin, err := bustest.EchoAgent()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "BUB_BUS_URL="+busURL, "BUB_AGENT_ID="+clientID, "BUB_DEFAULT_TOPIC="+topic)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stderr)
		seen := false
		for sc.Scan() {
			if !seen && strings.Contains(sc.Text(), "echo-agent ready") {
				seen = true
				close(ready)
			}
			select {
			case lines <- sc.Text():
			default: // the log is for a failure's message only
			}
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		for range lines {
		}
		cmd.Wait()
	})
	select {
	case <-ready:
	case <-time.After(bustest.Timeout):
		var log []string
		for len(lines) > 0 {
			log = append(log, <-lines)
		}
		t.Fatalf("echo-agent not ready within %v; its log: %s", bustest.Timeout, strings.Join(log, "\n"))
	}
}

// dialAgent connects an agent of the test to the fixture's bus as
// clientID, closed when the test ends.
func (f *fixture) dialAgent(t testing.TB, clientID string) *peer.Conn {
	t.Helper()
	conn, err := peer.Dial(t.Context(), f.bus.URL, &peer.Options{ClientID: clientID, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}
