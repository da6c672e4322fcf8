// Package pythonechoagent_test runs the Python echo agent, written on the
// Python SDK, under a real spawner and bus, to show that an agent needs no
// Go.
package pythonechoagent_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/internal/checkfor"
	"github.com/bub-bus/bub/spawner"
)

// python returns an interpreter that can run the agent: one that imports
// the SDK from this checkout (sdk/python/src), which needs Python 3.11
// and the websockets package. Debian's /usr/bin/python3 first
// (python3-websockets installs there; .ci/run installs it), then python3
// on PATH.
func python(t *testing.T) string {
	t.Helper()
	src, err := filepath.Abs(filepath.Join("..", "..", "sdk", "python", "src"))
	if err != nil {
		t.Fatal(err)
	}
	check := "import sys; sys.path.insert(0, sys.argv[1]); import bub_bus"
	for _, candidate := range []string{"/usr/bin/python3", "python3"} {
		path, err := exec.LookPath(candidate)
		if err != nil {
			continue
		}
		if exec.Command(path, "-c", check, src).Run() == nil {
			return path
		}
	}
	t.Skip("skipping: no python3 (3.11 or later) that can import the SDK's websockets (Debian: apt-get install python3-websockets)")
	return ""
}

// logBuffer collects the spawner's log, agents' output included.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestPythonEchoAgent(t *testing.T) {
	py := python(t)
	script, err := filepath.Abs("echo_agent.py")
	if err != nil {
		t.Fatal(err)
	}
	b := bustest.Start(t, nil)
	ctx := context.Background()

	client, replies := bustest.Collect(t, b.URL, "tester", "outbound:*")

	var log logBuffer
	sp, err := spawner.New(&spawner.Options{
		BusURL:        b.URL,
		Command:       []string{py, script},
		WorkspaceRoot: t.TempDir(),
		Logger:        slog.New(slog.NewTextHandler(&log, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- sp.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-stopped; err != nil {
			t.Errorf("spawner: %v", err)
		}
		if t.Failed() {
			t.Logf("spawner log:\n%s", &log)
		}
	}()
	checkfor.Check(t, 10*time.Second, func() error {
		if !strings.Contains(log.String(), "spawner serving") {
			return errors.New("spawner did not start")
		}
		return nil
	})

	var agentID string
	for i, msg := range []map[string]any{
		{"type": "telegram_message", "text": "hi", "chat_id": 77},
		{"type": "plaintext_message", "text": "again"},
	} {
		res, err := client.SendMessage(ctx, "tg:77", msg, nil)
		if err != nil || !res.Success {
			t.Fatalf("message %d: %+v, %v", i, res, err)
		}
		select {
		case d := <-replies:
			var r struct {
				Type    string `json:"type"`
				Text    string `json:"text"`
				ChatID  any    `json:"chat_id"`
				AgentID string `json:"agent_id"`
			}
			if err := d.Decode(&r); err != nil {
				t.Fatal(err)
			}
			if d.Topic != "outbound:77" || r.Type != "plaintext_message" || r.Text != "echo: "+msg["text"].(string) {
				t.Errorf("reply %d on %s: %+v", i, d.Topic, r)
			}
			if i == 0 {
				agentID = r.AgentID
			} else if r.AgentID != agentID {
				t.Errorf("second reply from %s, first from %s: the agent was not reused", r.AgentID, agentID)
			}
			if d.From != r.AgentID {
				t.Errorf("reply from %s claims agent %s", d.From, r.AgentID)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("no reply to message %d", i)
		}
	}
	if !strings.Contains(log.String(), "python-echo-agent: ready") {
		t.Errorf("the agent's stderr is not in the spawner's log")
	}
}

// TestDocstringCommandWorksFromAWorkspace: the docstring's spawner command
// must name the script in full, because agents start in their workspace;
// a relative path there sent newcomers to "can't open file".
func TestDocstringCommandWorksFromAWorkspace(t *testing.T) {
	src, err := os.ReadFile("echo_agent.py")
	if err != nil {
		t.Fatal(err)
	}
	commands := 0
	for _, line := range strings.Split(string(src), "\n") {
		_, command, ok := strings.Cut(line, `--command "`)
		if !ok {
			continue
		}
		commands++
		words := strings.Fields(strings.TrimSuffix(strings.TrimSpace(command), `"`))
		for _, w := range words[1:] {
			if strings.HasSuffix(w, ".py") && !strings.HasPrefix(w, "/") && !strings.HasPrefix(w, "$PWD/") {
				t.Errorf("docstring: %q names the script by a relative path, which agents (started in their workspace) cannot open", strings.TrimSpace(line))
			}
		}
	}
	if commands == 0 {
		t.Error("the docstring shows no bub spawner --command line")
	}
	if !strings.Contains(string(src), "workspace") {
		t.Error("the docstring does not say why the path must be absolute")
	}
}
