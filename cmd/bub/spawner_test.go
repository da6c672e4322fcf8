package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/spawner"
)

// echoAgentBinary builds examples/echo-agent once for the tests that
// need it.
var echoAgentBinary = exampleBinary("echo-agent")

// exampleDirs are the directories exampleBinary built into, which
// TestMain removes once the tests end.
var exampleDirs struct {
	sync.Mutex
	paths []string
}

// exampleBinary returns a function that builds examples/NAME the first
// time it is called, and returns the binary's path (or the build's
// error) every time.
func exampleBinary(name string) func() (string, error) {
	return sync.OnceValues(func() (string, error) {
		dir, err := os.MkdirTemp("", "bub-"+name+"-")
		if err != nil {
			return "", err
		}
		exampleDirs.Lock()
		exampleDirs.paths = append(exampleDirs.paths, dir)
		exampleDirs.Unlock()
		bin := filepath.Join(dir, name)
		out, err := exec.Command("go", "build", "-o", bin, "../../examples/"+name).CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("build %s: %v: %s", name, err, out)
		}
		return bin, nil
	})
}

// process is a long-running bub command whose stdout lines are collected.
type process struct {
	cmd    *exec.Cmd
	lines  chan string
	stderr *lockedBuffer
}

// startBub starts a long-running bub command with env added to the
// environment, and stops it with SIGTERM when the test ends.
func startBub(t *testing.T, env []string, args ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(bubBinary, args...), lines: make(chan string, 100), stderr: &lockedBuffer{}}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stderr = p.stderr
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	t.Cleanup(func() {
		// SIGTERM, so a spawner stops its agents rather than orphan
		// them.
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = p.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = p.cmd.Process.Kill()
			<-done
		}
		if strings.Contains(p.stderr.String(), "DATA RACE") {
			t.Errorf("the race detector fired in bub %s:\n%s", args[0], p.stderr)
		}
	})
	return p
}

// echoReply is a delivery of the echo agent's reply, as bub listen prints
// it.
type echoReply struct {
	Topic   string `json:"topic"`
	Payload struct {
		Type    string `json:"type"`
		Text    string `json:"text"`
		ChatID  any    `json:"chat_id"`
		AgentID string `json:"agent_id"`
	} `json:"payload"`
}

// TestSpawnerEndToEnd runs the spawner walkthrough of docs/guide/04-spawning-agents.md with real
// processes: bub serve, bub spawner with the echo agent, bub listen on
// outbound:*, and bub send-message.
func TestSpawnerEndToEnd(t *testing.T) {
	t.Parallel()
	agentBin, err := echoAgentBinary()
	if err != nil {
		t.Fatal(err)
	}
	d := startBus(t, t.TempDir(), "--retry-base-delay", "100ms")
	env := []string{"BUB_BUS_URL=" + d.url}

	// Listeners first, so that nothing they should see is missed.
	outbound := startBub(t, env, "listen", "--topic", "outbound:*")
	events := startBub(t, env, "listen", "--topic", "system:agent.*", "--policy", "continueAll")
	for _, probe := range []string{"outbound:probe", "system:agent.probe"} {
		require.Eventually(t, func() bool {
			_, _, code := bub(t, env, "", "send-message", "--topic", probe, "--payload", `{"type":"probe"}`)
			return code == 0
		}, 20*time.Second, 20*time.Millisecond, "a listener on "+probe)
	}
	root := filepath.Join(t.TempDir(), "workspaces")
	sp := startBub(t, env, "spawner", "--command", agentBin, "--workspace-root", root, "--spawn-timeout", "10s")
	require.Eventually(t, func() bool { return strings.Contains(sp.stderr.String(), "spawner serving") }, 20*time.Second, 20*time.Millisecond, "the spawner to serve")

	replies := make(chan echoReply, 100)
	go func() {
		for line := range outbound.lines {
			var r echoReply
			if json.Unmarshal([]byte(line), &r) == nil && r.Payload.Type == "plaintext_message" {
				replies <- r
			}
		}
	}()
	agentEvents := make(chan spawner.Event, 100)
	go func() {
		for line := range events.lines {
			var delivery struct {
				Payload spawner.Event `json:"payload"`
			}
			if json.Unmarshal([]byte(line), &delivery) == nil && delivery.Payload.Type == spawner.EventType {
				agentEvents <- delivery.Payload
			}
		}
	}()
	nextReply := func() echoReply {
		t.Helper()
		select {
		case r := <-replies:
			return r
		case <-time.After(20 * time.Second):
			t.Fatalf("no reply; spawner log:\n%s", sp.stderr)
			return echoReply{}
		}
	}
	nextEvent := func(name string) spawner.Event {
		t.Helper()
		deadline := time.After(20 * time.Second)
		for {
			select {
			case ev := <-agentEvents:
				if ev.Event == name {
					return ev
				}
			case <-deadline:
				t.Fatalf("no %s event; spawner log:\n%s", name, sp.stderr)
				return spawner.Event{}
			}
		}
	}

	// The first message to a new chat reaches the agent spawned for it.
	out, errOut, code := bub(t, env, "", "send-message", "--topic", "tg:123", "--payload", `{"type":"telegram_message","text":"hi","chat_id":"123"}`)
	if code != 0 {
		t.Fatalf("send-message: exit %d: %s%s", code, out, errOut)
	}
	first := nextReply()
	if first.Topic != "outbound:123" || first.Payload.Text != "echo: hi" || first.Payload.ChatID != "123" {
		t.Fatalf("reply %+v", first)
	}
	spawned := nextEvent(spawner.EventSpawned)
	if spawned.AgentID != first.Payload.AgentID || spawned.Topic != "tg:123" || filepath.Dir(spawned.Workspace) != root {
		t.Errorf("spawned event %+v for the reply from %s", spawned, first.Payload.AgentID)
	}

	t.Run("20 new chats at once", func(t *testing.T) {
		const n = 20
		var wg sync.WaitGroup
		failures := make(chan string, n)
		for i := range n {
			wg.Go(func() {
				payload := fmt.Sprintf(`{"type":"telegram_message","text":"hello %d","chat_id":"c%d"}`, i, i)
				cmd := exec.Command(bubBinary, "send-message", "--topic", fmt.Sprintf("tg:c%d", i), "--payload", payload)
				cmd.Env = append(os.Environ(), env...)
				if out, err := cmd.CombinedOutput(); err != nil {
					failures <- fmt.Sprintf("chat %d: %v: %s", i, err, out)
				}
			})
		}
		wg.Wait()
		close(failures)
		for f := range failures {
			t.Error(f)
		}
		seen := map[string]int{}
		agents := map[string]string{}
		for range n {
			r := nextReply()
			seen[r.Topic+" "+r.Payload.Text]++
			agents[r.Payload.AgentID] = r.Topic
		}
		for i := range n {
			if key := fmt.Sprintf("outbound:c%d echo: hello %d", i, i); seen[key] != 1 {
				t.Errorf("%q answered %d times", key, seen[key])
			}
		}
		if len(agents) != n {
			t.Errorf("%d agents answered %d chats: %v", len(agents), n, agents)
		}
		// Exactly once: nothing more comes.
		select {
		case r := <-replies:
			t.Errorf("extra reply %+v", r)
		case <-time.After(300 * time.Millisecond):
		}
	})

	t.Run("second message reuses the agent", func(t *testing.T) {
		out, errOut, code := bub(t, env, "", "send-message", "--topic", "tg:123", "--payload", `{"type":"telegram_message","text":"again","chat_id":"123"}`)
		if code != 0 || !strings.Contains(out, `"client_id":"`+first.Payload.AgentID+`"`) {
			t.Fatalf("send-message: exit %d: %s%s; want an ack from %s", code, out, errOut, first.Payload.AgentID)
		}
		if r := nextReply(); r.Payload.Text != "echo: again" || r.Payload.AgentID != first.Payload.AgentID {
			t.Errorf("reply %+v, want one from %s", r, first.Payload.AgentID)
		}
	})

	t.Run("path traversal stays in the workspace root", func(t *testing.T) {
		if _, errOut, code := bub(t, env, "", "send-message", "--topic", "tg:../../etc", "--payload", `{"type":"telegram_message","text":"x","chat_id":"etc"}`); code != 0 {
			t.Fatalf("send-message: exit %d: %s", code, errOut)
		}
		if r := nextReply(); r.Topic != "outbound:etc" {
			t.Errorf("reply %+v", r)
		}
		var ev spawner.Event
		for ev.Topic != "tg:../../etc" {
			ev = nextEvent(spawner.EventSpawned)
		}
		if filepath.Dir(ev.Workspace) != root || filepath.Base(ev.Workspace) != spawner.WorkspaceName("tg:../../etc") {
			t.Errorf("workspace %s, want %s under %s", ev.Workspace, spawner.WorkspaceName("tg:../../etc"), root)
		}
		if entries, _ := os.ReadDir(filepath.Dir(root)); len(entries) != 1 {
			t.Errorf("something was created beside the workspace root: %v", entries)
		}
	})

	t.Run("killed agent is replaced and its message retried", func(t *testing.T) {
		agentID := first.Payload.AgentID
		handled := func() int {
			n := 0
			for _, line := range strings.Split(sp.stderr.String(), "\n") {
				if strings.Contains(line, "agent_id="+agentID) && strings.Contains(line, "handling message") {
					n++
				}
			}
			return n
		}
		before := handled()
		slow := exec.Command(bubBinary, "send-message", "--topic", "tg:123", "--payload", `{"type":"telegram_message","text":"slow","chat_id":"123","delay_ms":1500}`)
		slow.Env = append(os.Environ(), env...)
		var slowOut lockedBuffer
		slow.Stdout = &slowOut
		if err := slow.Start(); err != nil {
			t.Fatal(err)
		}
		require.Eventually(t, func() bool { return handled() > before }, 20*time.Second, 20*time.Millisecond, "the agent to take the message")
		if err := syscall.Kill(spawned.PID, syscall.SIGKILL); err != nil {
			t.Fatalf("kill agent %s (pid %d): %v", agentID, spawned.PID, err)
		}
		_ = slow.Wait()
		if !strings.Contains(slowOut.String(), `"retrying":true`) {
			t.Errorf("the in-flight message's result does not announce a retry: %s", slowOut.String())
		}
		var exited spawner.Event
		for exited.AgentID != agentID {
			exited = nextEvent(spawner.EventExited)
		}
		if !exited.Restarting || exited.PID != spawned.PID || exited.ExitCode == nil || *exited.ExitCode != -1 {
			t.Errorf("exited event %+v: want the killed pid %d, restarting", exited, spawned.PID)
		}
		// At least once: a message the bus had not seen answered when
		// the agent died is answered again; skip such repeats.
		r := nextReply()
		for r.Payload.Text != "echo: slow" {
			r = nextReply()
		}
		if r.Payload.AgentID != agentID {
			t.Errorf("reply after the kill %+v, want echo: slow from %s", r, agentID)
		}
		// Not lost, and not dead-lettered on the way either.
		if out, _, _ := bub(t, env, "", "dlq", "list", "--json"); strings.Contains(out, "tg:123") {
			t.Errorf("a tg:123 message was dead-lettered: %s", out)
		}
	})
}

// TestSpawnerUsage checks bub spawner's refusals, in process.
func TestSpawnerUsage(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no command", []string{"spawner"}, 2, "pass --command"},
		{"bad quoting", []string{"spawner", "--command", `agent "open`}, 2, "unterminated double quote"},
		{"stray argument", []string{"spawner", "--command", "sh", "extra"}, 2, `unexpected argument "extra"`},
		{"no patterns", []string{"spawner", "--command", "sh", "--patterns", " , "}, 2, "--patterns is empty"},
		{"missing program", []string{"spawner", "--command", "/nonexistent/agent", "--workspace-root", t.TempDir()}, 1, "/nonexistent/agent"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errOut := runCLI(ctx, "", tt.args...)
			if code != tt.code || !strings.Contains(errOut, tt.want) {
				t.Errorf("exit %d, stderr %q; want exit %d mentioning %q", code, errOut, tt.code, tt.want)
			}
		})
	}
}
