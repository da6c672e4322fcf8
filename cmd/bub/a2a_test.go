package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	spec "github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/bub-bus/bub/a2a/a2atest"
	"github.com/bub-bus/bub/internal/checkfor"
)

// TestA2AServe runs bub serve with --a2a-config and auth, and walks the
// issue's A2A client through it: discover the agent's card, send a
// streaming message, lose the stream and resume it with Last-Event-ID
// without losing an event, retry the send without a second task, and
// find the task again after kill -9 of the bus; and receive the task's
// events as push notifications, signed, on both sides of the kill.
func TestA2AServe(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tokens := map[string]string{"gw": "a2a-gateway-token-0123456789", "writer": "writer-token-0123456789", "alice": "alice-token-0123456789"}
	hash := func(name string) string {
		sum := sha256.Sum256([]byte(tokens[name]))
		return hex.EncodeToString(sum[:])
	}
	write := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	write("gw.token", tokens["gw"])
	busConfig := write("bus.yaml", `auth:
  identities:
    - name: a2a-gateway
      token_sha256: "`+hash("gw")+`"
      client_ids: ["a2a-gw"]
      publish:   {allow: ["agent:writer", "a2a-push:"]}
      subscribe: {allow: ["outbound:a2a-", "system:message.dead_lettered"]}
      durable: true
      admin: true
    - name: writer
      token_sha256: "`+hash("writer")+`"
      client_ids: ["writer"]
      publish:   {allow: ["outbound:a2a-"]}
      subscribe: {allow: ["agent:writer"]}
    - name: alice
      token_sha256: "`+hash("alice")+`"
      client_ids: ["alice"]
      publish:   {allow: ["agent:writer"]}
`)
	a2aConfig := write("a2a.yaml", `agents:
  - name: writer
    description: writes drafts
    topic: agent:writer
    client_id: a2a-gw
    token_file: gw.token
    skills:
      - {id: draft, name: Draft, tags: [writing]}
`)
	addr := freeAddr(t)
	data := filepath.Join(dir, "data")
	// The push receiver is on loopback.
	flags := []string{"--config", busConfig, "--a2a-config", a2aConfig, "--log-level", "warn", "--webhook-allow-private"}
	d := startBusAt(t, addr, data, flags...)
	url := d.http + "/a2a/writer"
	alice := []string{"Authorization", "Bearer " + tokens["alice"]}

	card := a2atest.AwaitCard(t, url)
	if _, ok := card.SecuritySchemes["bearer"]; !ok || card.SupportedInterfaces[0].URL != url || card.Skills[0].ID != "draft" {
		t.Fatalf("card: %+v", card)
	}
	if resp := a2atest.Do(t, url, "GetTask", map[string]any{"id": "x"}); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("without a token: HTTP %d", resp.StatusCode)
	}
	// The writer's own credential may not publish on agent:writer.
	if resp := a2atest.Do(t, url, "GetTask", map[string]any{"id": "x"}, "Authorization", "Bearer "+tokens["writer"]); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("with a credential whose grants do not reach the agent: HTTP %d", resp.StatusCode)
	}

	agent := a2atest.StartAgent(t, d.url, "writer", tokens["writer"], "agent:writer")
	push := a2atest.NewPushReceiver(t)
	send := a2atest.UserMessage("m-1", "draft it")
	send["configuration"] = map[string]any{"taskPushNotificationConfig": map[string]any{"url": push.URL + "/hook", "token": "push-token"}}
	s := a2atest.OpenStream(t, url, "SendStreamingMessage", send, alice...)
	first, ok := s.Next(t)
	task, isTask := first.Decode(t).(*spec.Task)
	if !ok || first.ID != 1 || !isTask {
		t.Fatalf("first event: %+v", first)
	}
	p := agent.TaskOf(t, task)
	if p.A2A.Caller != "alice" {
		t.Fatalf("the bus message names caller %q", p.A2A.Caller)
	}
	agent.Say(t, p, map[string]any{"type": "a2a_status", "state": "working", "text": "drafting"})
	last := s.UntilStatusText(t, "drafting")
	s.Close()
	firstPush := push.Next(t)
	firstPush.Verify(t, "push-token")
	if pushed, ok := firstPush.Event(t).(*spec.Task); !ok || pushed.ID != task.ID {
		t.Fatalf("first push notification %s, want task %s", firstPush.Body, task.ID)
	}
	// The notification is in the bus's journal like every delivery.
	checkfor.Check(t, a2atest.Timeout, func() error {
		out, stderr, _ := bub(t, nil, "", "trace", firstPush.Header.Get("Bub-Message-Id"), "--bus-url", d.url, "--token", tokens["gw"])
		if !strings.Contains(out, "delivery        to bub-webhook-a2a-") || !strings.Contains(out, "processed") {
			return fmt.Errorf("bub trace of the push notification: %s%s", out, stderr)
		}
		return nil
	})
	agent.Say(t, p, map[string]any{"type": "a2a_artifact", "artifact": map[string]any{"artifactId": "d", "parts": []any{map[string]any{"text": "draft"}}}})
	agent.Say(t, p, map[string]any{"type": "a2a_status", "state": "input-required", "text": "which tone?"})
	resumed := a2atest.OpenStream(t, url, "SubscribeToTask", map[string]any{"id": task.ID}, append(alice, "Last-Event-ID", strconv.FormatUint(last, 10))...).All(t)
	a2atest.CheckResumed(t, resumed, last, 2)

	if again := a2atest.Submit(t, url, "m-1", "draft it", alice...); again.ID != task.ID {
		t.Fatalf("the retry made task %s beside %s", again.ID, task.ID)
	}

	resp, err := http.Get(d.http + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(metrics), `bub_a2a_tasks_created_total{agent="writer"} 1`) {
		t.Errorf("/metrics has no A2A task counted:\n%s", metrics)
	}

	d.kill() // SIGKILL: no drain, no clean close of the store
	d = startBusAt(t, addr, data, flags...)
	a2atest.AwaitCard(t, url)
	got := a2atest.AwaitState(t, url, task.ID, spec.TaskStateInputRequired, alice...)
	if len(got.Artifacts) != 1 || got.Status.Message.Parts[0].Text() != "which tone?" {
		t.Fatalf("after kill -9: %+v", got)
	}
	if again := a2atest.Submit(t, url, "m-1", "draft it", alice...); again.ID != task.ID {
		t.Fatal("after kill -9 the retry made a second task")
	}
	// The agent answers the task's question; its reconnected connection
	// and the A2A server's carry the conversation on.
	reply := a2atest.UserMessage("m-2", "friendly")
	reply["message"].(map[string]any)["taskId"] = task.ID
	a2atest.Post(t, url, "SendMessage", map[string]any{"message": reply["message"], "configuration": map[string]any{"returnImmediately": true}}, alice...)
	p2 := agent.TaskOf(t, task)
	agent.Say(t, p2, map[string]any{"type": "plaintext_message", "text": "here it is"})
	done := a2atest.AwaitState(t, url, task.ID, spec.TaskStateCompleted, alice...)
	if n := len(done.History); n != 5 {
		t.Fatalf("history of %d messages, want 5 (two from the caller, three from the agent)", n)
	}
	// The completion, made after the kill, is pushed too (earlier
	// events may come again: delivery is at least once).
	for {
		n := push.Next(t)
		n.Verify(t, "push-token")
		if su, ok := n.Event(t).(*spec.TaskStatusUpdateEvent); ok && su.Status.State == spec.TaskStateCompleted {
			break
		}
	}
}

// On an open bus no credential guards the A2A door, so, as the bus's
// WebSocket door does, it answers only a Host that names the bus: a web
// page that rebinds its name to 127.0.0.1 is refused.
func TestA2AOpenBusChecksHost(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	config := openA2AConfig(t, dir)
	d := startBus(t, filepath.Join(dir, "data"), "--a2a-config", config, "--hosts", "bus.example", "--log-level", "warn")
	url := d.http + "/a2a/w"
	card := a2atest.AwaitCard(t, url)
	if len(card.SecuritySchemes) != 0 {
		t.Errorf("an open bus's card declares %v", card.SecuritySchemes)
	}
	a2atest.Post(t, url, "GetTask", map[string]any{"id": "x"}).WantCode(t, -32001)
	_, port, _ := strings.Cut(strings.TrimPrefix(d.http, "http://"), ":")
	for host, want := range map[string]int{"evil.example:" + port: http.StatusForbidden, "localhost:" + port: http.StatusOK, "bus.example": http.StatusOK} {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url+"/.well-known/agent-card.json", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Host %s: HTTP %d, want %d", host, resp.StatusCode, want)
		}
	}
}
