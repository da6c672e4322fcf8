package a2a_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	spec "github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/bub-bus/bub/a2a"
	"github.com/bub-bus/bub/a2a/a2atest"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/peer"
)

// These are what the official TCK (a2aproject/a2a-tck, 1.0-dev) found
// the server did otherwise; docs/A2A.md, "The official TCK".

// A body whose Content-Type is not JSON is -32005 (JSONRPC-SSE-002).
func TestContentTypeRefused(t *testing.T) {
	t.Parallel()
	f, _ := startW(t)
	for _, tc := range []struct {
		ct   string
		want int
	}{
		{"text/plain", a2a.CodeContentTypeUnsupported},
		{"application/x-www-form-urlencoded", a2a.CodeContentTypeUnsupported},
		{"application/a2a+json", a2a.CodeTaskNotFound},
		{"application/json; charset=utf-8", a2a.CodeTaskNotFound},
	} {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, f.url("w"), strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"x"}}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", tc.ct)
		req.Header.Set("A2A-Version", "1.0")
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var got a2atest.Response
		err = json.NewDecoder(r.Body).Decode(&got)
		r.Body.Close()
		if err != nil || got.Error == nil || got.Error.Code != tc.want {
			t.Errorf("Content-Type %s: %+v, %v; want %d", tc.ct, got.Error, err, tc.want)
		}
	}
}

// GetTask takes historyLength under its proto name too, as ProtoJSON
// parsers do (CORE-HIST-001, -002).
func TestProtoFieldNames(t *testing.T) {
	t.Parallel()
	f, agent := startW(t)
	task := a2atest.Submit(t, f.url("w"), "m-1", "hi")
	agent.Say(t, agent.TaskOf(t, task), map[string]any{"type": "plaintext_message", "text": "done"})
	var got spec.Task
	a2atest.Post(t, f.url("w"), "GetTask", map[string]any{"id": task.ID, "history_length": 0}).Decode(t, &got)
	if len(got.History) != 0 {
		t.Fatalf("history_length 0: %d messages", len(got.History))
	}
}

// SubscribeToTask on a task that waits for its caller stays open until
// the task goes on and ends (STREAM-SUB-002), rather than close after
// the snapshot.
func TestSubscribeToInterruptedTask(t *testing.T) {
	t.Parallel()
	f, agent := startW(t)
	task := a2atest.Submit(t, f.url("w"), "m-1", "hi")
	p := agent.TaskOf(t, task)
	agent.Say(t, p, map[string]any{"type": "a2a_status", "state": "input-required", "text": "which one?"})
	a2atest.AwaitState(t, f.url("w"), task.ID, spec.TaskStateInputRequired)

	s := a2atest.OpenStream(t, f.url("w"), "SubscribeToTask", map[string]any{"id": task.ID})
	first, ok := s.Next(t)
	if !ok {
		t.Fatal("no snapshot")
	}
	if snap, isTask := first.Decode(t).(*spec.Task); !isTask || snap.Status.State != spec.TaskStateInputRequired {
		t.Fatalf("first event %+v", first)
	}
	agent.Say(t, p, map[string]any{"type": "plaintext_message", "text": "done"})
	evs := s.All(t)
	if len(evs) == 0 {
		t.Fatal("the stream closed after the snapshot")
	}
	last, isStatus := evs[len(evs)-1].Decode(t).(*spec.TaskStatusUpdateEvent)
	if !isStatus || last.Status.State != spec.TaskStateCompleted {
		t.Fatalf("last event %+v, want the completion", evs[len(evs)-1])
	}
}

// Cards carry an ETag, and a client that has the card gets 304
// (CARD-CACHE-002).
func TestCardETag(t *testing.T) {
	t.Parallel()
	f, _ := startW(t)
	for _, url := range []string{f.url("w") + "/.well-known/agent-card.json", f.http.URL + "/a2a/.well-known/agent-cards.json"} {
		r, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		etag := r.Header.Get("ETag")
		if r.StatusCode != http.StatusOK || !strings.HasPrefix(etag, `"`) {
			t.Fatalf("%s: HTTP %d, ETag %q", url, r.StatusCode, etag)
		}
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
		req.Header.Set("If-None-Match", etag)
		r, err = http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode != http.StatusNotModified {
			t.Fatalf("%s with If-None-Match: HTTP %d", url, r.StatusCode)
		}
	}
}

// An agent may answer with a message rather than a task (§3.1.1): the
// blocking SendMessage gets the message (DM-MSG-001), and the task
// behind it is completed with it.
func TestDirectMessage(t *testing.T) {
	t.Parallel()
	f := start(t, a2a.Agent{Name: "w", Topic: "agent:w", ClientID: "a2a-gw"})
	conn := f.dialAgent(t, "w")
	err := conn.Subscribe(t.Context(), "agent:w", func(ctx context.Context, d *peer.Delivery) (peer.Result, error) {
		p, ok := a2a.TaskOf(d)
		if !ok {
			return peer.Result{Reject: true, Message: "not an A2A task"}, nil
		}
		return peer.Result{Processed: true}, a2a.SendDirectMessage(ctx, d.Conn, p, "just this")
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var sr spec.StreamResponse
	a2atest.Post(t, f.url("w"), "SendMessage", a2atest.UserMessage("m-1", "hi")).Decode(t, &sr)
	m, ok := sr.Event.(*spec.Message)
	if !ok || m.Role != spec.MessageRoleAgent || m.TaskID != "" || m.ContextID == "" || m.Parts[0].Text() != "just this" {
		t.Fatalf("SendMessage answered %#v, want the agent's message", sr.Event)
	}
	var list spec.ListTasksResponse
	a2atest.Post(t, f.url("w"), "ListTasks", map[string]any{"contextId": m.ContextID}).Decode(t, &list)
	if len(list.Tasks) != 1 || list.Tasks[0].Status.State != spec.TaskStateCompleted {
		t.Fatalf("the task behind it: %+v", list.Tasks)
	}
	a2atest.Post(t, f.url("w"), "SendMessage", a2atest.UserMessage("m-1", "hi")).Decode(t, &sr)
	if again, ok := sr.Event.(*spec.Message); !ok || again.ID != m.ID {
		t.Fatalf("the retry answered %#v, want the same message", sr.Event)
	}
}

// With IdempotencyHeaderOnly a repeated messageId is a new task, as a
// client that reuses ids (the TCK) needs; the header still marks a
// retry.
func TestIdempotencyHeaderOnly(t *testing.T) {
	t.Parallel()
	f := &fixture{bus: bustest.Start(t, nil)}
	f.opts = a2a.Options{
		BusURL:                f.bus.URL,
		Agents:                []a2a.Agent{{Name: "w", Topic: "agent:w", ClientID: "a2a-gw"}},
		Path:                  filepath.Join(t.TempDir(), "a2a.db"),
		Logger:                slog.New(slog.DiscardHandler),
		IdempotencyHeaderOnly: true,
	}
	f.open(t)
	a2atest.StartAgent(t, f.bus.URL, "w", "", "agent:w")
	url := f.url("w")
	if a, b := a2atest.Submit(t, url, "m-1", "hi"), a2atest.Submit(t, url, "m-1", "hi"); a.ID == b.ID {
		t.Fatal("a repeated messageId without the header was taken for a retry")
	}
	if a, b := a2atest.Submit(t, url, "m-2", "hi", "Idempotency-Key", "k"), a2atest.Submit(t, url, "m-3", "hi", "Idempotency-Key", "k"); a.ID != b.ID {
		t.Fatal("the Idempotency-Key header no longer marks a retry")
	}
	// Nor does a repeated messageId to an existing task.
	first := a2atest.Submit(t, url, "m-4", "hi")
	for range 2 {
		next := a2atest.UserMessage("m-4", "again")
		next["message"].(map[string]any)["taskId"] = first.ID
		next["configuration"] = map[string]any{"returnImmediately": true}
		a2atest.Post(t, url, "SendMessage", next).Decode(t, new(spec.StreamResponse))
	}
	var got spec.Task
	a2atest.Post(t, url, "GetTask", map[string]any{"id": first.ID}).Decode(t, &got)
	if len(got.History) != 3 {
		t.Fatalf("task %s has %d messages, want the three sent", first.ID, len(got.History))
	}
	card := a2atest.AwaitCard(t, url)
	if d := card.Capabilities.Extensions[1].Description; !strings.Contains(d, "same Idempotency-Key header within") {
		t.Fatalf("the card says %q", d)
	}
}
