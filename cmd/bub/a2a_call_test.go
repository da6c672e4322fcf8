package main

import (
	"bytes"
	"context"
	"encoding/json"
	"iter"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"

	"github.com/bub-bus/bub/a2a"
	"github.com/bub-bus/bub/a2a/a2atest"
	"github.com/bub-bus/bub/peer"
)

// call is a bub a2a call process running in the background.
type call struct {
	cmd         *exec.Cmd
	out, errOut bytes.Buffer
	done        chan struct{}
}

// startCall runs bub a2a call with args and env.
func startCall(t *testing.T, env []string, args ...string) *call {
	t.Helper()
	c := &call{cmd: exec.Command(bubBinary, append([]string{"a2a", "call"}, args...)...), done: make(chan struct{})}
	c.cmd.Env = append(os.Environ(), env...)
	c.cmd.Stdout, c.cmd.Stderr = &c.out, &c.errOut
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(c.done)
		_ = c.cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = c.cmd.Process.Kill()
		<-c.done
	})
	return c
}

// wait waits for the process and returns its exit status.
func (c *call) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(a2atest.Timeout):
		t.Fatalf("bub a2a call did not end within %v; stderr: %s", a2atest.Timeout, c.errOut.String())
	}
	if strings.Contains(c.errOut.String(), "DATA RACE") {
		t.Fatalf("the race detector fired in bub a2a call:\n%s", c.errOut.String())
	}
	return c.cmd.ProcessState.ExitCode()
}

// TestA2ACallBusToBus: a bus agent calls a remote A2A agent that is in
// fact an agent of another bus: bub a2a call streams the remote task,
// prints each event and publishes it on the local bus, exits 3 while
// the task waits for input and 0 once the answer completes it.
func TestA2ACallBusToBus(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	config := openA2AConfig(t, dir)
	remote := startBus(t, filepath.Join(dir, "remote"), "--a2a-config", config, "--log-level", "warn")
	agentURL := remote.http + "/a2a/w"
	a2atest.AwaitCard(t, agentURL)
	agent := a2atest.StartAgent(t, remote.url, "w", "", "agent:w")

	local := startBus(t, filepath.Join(dir, "local"), "--log-level", "warn")
	caller, err := peer.Dial(t.Context(), local.url, &peer.Options{ClientID: "caller", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer caller.Close()
	updates := make(chan a2a.Update, 64)
	err = caller.Subscribe(t.Context(), "agent:caller", func(_ context.Context, d *peer.Delivery) (peer.Result, error) {
		var u a2a.Update
		if err := d.Decode(&u); err != nil {
			return peer.Result{}, err
		}
		updates <- u
		return peer.Result{Processed: true}, nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	env := []string{"BUB_BUS_URL=" + local.url, "BUB_A2A_PUBLISH=agent:caller"}

	c := startCall(t, env, "--agent", agentURL, "--text", "plan a trip")
	p := agent.Next(t)
	agent.Say(t, p, map[string]any{"type": "a2a_status", "state": "input-required", "text": "where to?"})
	if code := c.wait(t); code != exitWaiting {
		t.Fatalf("exit %d, want %d; stderr: %s", code, exitWaiting, c.errOut.String())
	}
	if !strings.Contains(c.errOut.String(), "--task-id "+string(p.A2A.TaskID)) {
		t.Fatalf("stderr does not say how to answer: %s", c.errOut.String())
	}
	last := lastUpdate(t, updates)
	if last.CorrelationID != string(p.A2A.TaskID) || last.State != spec.TaskStateInputRequired || last.Text != "where to?" {
		t.Fatalf("last update %+v", last)
	}

	c = startCall(t, env, "--agent", agentURL+"/.well-known/agent-card.json", "--text", "Lisbon", "--task-id", string(p.A2A.TaskID), "--context-id", p.ConversationID)
	p2 := agent.Next(t)
	if p2.A2A.TaskID != p.A2A.TaskID {
		t.Fatalf("the answer made task %s, want %s", p2.A2A.TaskID, p.A2A.TaskID)
	}
	agent.Say(t, p2, map[string]any{"type": "plaintext_message", "text": "booked"})
	if code := c.wait(t); code != 0 {
		t.Fatalf("exit %d; stderr: %s", code, c.errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(c.out.String()), "\n")
	var sr spec.StreamResponse
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &sr); err != nil {
		t.Fatalf("stdout's last line %q: %v", lines[len(lines)-1], err)
	}
	if su, ok := sr.Event.(*spec.TaskStatusUpdateEvent); !ok || su.Status.State != spec.TaskStateCompleted {
		t.Fatalf("stdout's last event %s", lines[len(lines)-1])
	}
	if last := lastUpdate(t, updates); last.State != spec.TaskStateCompleted || last.Text != "booked" {
		t.Fatalf("last update %+v", last)
	}

	// Publishing where nobody listens is a failure, not a success.
	c = startCall(t, []string{"BUB_BUS_URL=" + local.url}, "--agent", agentURL, "--text", "again", "--publish", "tg:nobody")
	agent.Say(t, agent.Next(t), map[string]any{"type": "plaintext_message", "text": "done"})
	if code := c.wait(t); code != 1 || !strings.Contains(c.errOut.String(), "nobody subscribes") {
		t.Fatalf("exit %d; stderr: %s", code, c.errOut.String())
	}
}

// openA2AConfig writes, in dir, the --a2a-config of an open bus: agent
// w on agent:w.
func openA2AConfig(t *testing.T, dir string) string {
	t.Helper()
	config := filepath.Join(dir, "a2a.yaml")
	if err := os.WriteFile(config, []byte("agents:\n  - {name: w, topic: 'agent:w', client_id: a2a-gw}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return config
}

// lastUpdate reads updates until a final one.
func lastUpdate(t *testing.T, updates <-chan a2a.Update) a2a.Update {
	t.Helper()
	for {
		select {
		case u := <-updates:
			if u.Final {
				return u
			}
		case <-time.After(a2atest.Timeout):
			t.Fatalf("no final update within %v", a2atest.Timeout)
		}
	}
}

// script is an a2a-go agent: "fail" fails its task, "hello" is
// answered with a message, anything else works, makes an artifact and
// completes.
type script struct{}

func (script) Execute(_ context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[spec.Event, error] {
	return func(yield func(spec.Event, error) bool) {
		text := ec.Message.Parts[0].Text()
		if text == "hello" {
			yield(spec.NewMessage(spec.MessageRoleAgent, spec.NewTextPart("hi there")), nil)
			return
		}
		if !yield(spec.NewSubmittedTask(ec, ec.Message), nil) || !yield(spec.NewStatusUpdateEvent(ec, spec.TaskStateWorking, nil), nil) {
			return
		}
		if text == "fail" {
			yield(spec.NewStatusUpdateEvent(ec, spec.TaskStateFailed, spec.NewMessage(spec.MessageRoleAgent, spec.NewTextPart("out of ink"))), nil)
			return
		}
		if !yield(spec.NewArtifactEvent(ec, spec.NewTextPart("the draft")), nil) {
			return
		}
		yield(spec.NewStatusUpdateEvent(ec, spec.TaskStateCompleted, nil), nil)
	}
}

func (script) Cancel(_ context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[spec.Event, error] {
	return func(yield func(spec.Event, error) bool) {
		yield(spec.NewStatusUpdateEvent(ec, spec.TaskStateCanceled, nil), nil)
	}
}

// TestA2ACallA2ASrv calls an agent served by a2a-go's own server, for a
// view of the client side that is not the bus's: a streamed task with an
// artifact, a message answer, and a failed task's exit status.
func TestA2ACallA2ASrv(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	card := &spec.AgentCard{
		Name: "scripted", Description: "a2a-go's server", Version: "1",
		SupportedInterfaces: []*spec.AgentInterface{spec.NewAgentInterface(srv.URL, spec.TransportProtocolJSONRPC)},
		Capabilities:        spec.AgentCapabilities{Streaming: true},
		DefaultInputModes:   []string{"text/plain"}, DefaultOutputModes: []string{"text/plain"},
	}
	mux.Handle(a2asrv.WellKnownAgentCardPath, a2asrv.NewStaticAgentCardHandler(card))
	mux.Handle("/", a2asrv.NewJSONRPCHandler(a2asrv.NewHandler(script{})))

	stdout, stderr, code := bub(t, nil, "", "a2a", "call", "--agent", srv.URL, "--text", "draft it")
	if code != 0 || !strings.Contains(stdout, `"artifactUpdate"`) || !strings.Contains(stdout, "the draft") {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	stdout, stderr, code = bub(t, nil, "", "a2a", "call", "--agent", srv.URL, "--text", "hello", "--no-stream")
	if code != 0 || !strings.Contains(stdout, "hi there") {
		t.Fatalf("a message answer: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	_, stderr, code = bub(t, nil, "", "a2a", "call", "--agent", srv.URL, "--text", "fail")
	if code != 1 || !strings.Contains(stderr, "TASK_STATE_FAILED") || !strings.Contains(stderr, "out of ink") {
		t.Fatalf("a failed task: exit %d, stderr: %s", code, stderr)
	}
	_, stderr, code = bub(t, nil, "", "a2a", "call", "--agent", srv.URL+"/nothing-here", "--text", "x")
	if code != 1 || !strings.Contains(stderr, "agent card") || !strings.Contains(stderr, "/nothing-here") {
		t.Fatalf("no card: exit %d, stderr: %s", code, stderr)
	}
	if _, stderr, code = bub(t, nil, "", "a2a", "call", "--agent", srv.URL); code != 2 || !strings.Contains(stderr, "--text") {
		t.Fatalf("no message: exit %d, stderr: %s", code, stderr)
	}
}
