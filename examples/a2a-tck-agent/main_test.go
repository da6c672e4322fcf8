package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	spec "github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/bub-bus/bub/a2a"
	"github.com/bub-bus/bub/a2a/a2atest"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/internal/checkfor"
)

// TestScenarios runs the agent as the TCK run does, behind a real bus
// and A2A server over loopback, and plays every scenario through the
// A2A JSON-RPC binding.
func TestScenarios(t *testing.T) {
	url := startSUT(t)

	tests := []struct {
		messageID string
		want      string // the finished task, as summary writes it
	}{
		{"tck-complete-task-1", `COMPLETED "Hello from TCK"`},
		{"tck-artifact-text-1", `COMPLETED text[text:"Generated text content"]`},
		{"tck-artifact-file-1", `COMPLETED file[raw:"tck" output.txt text/plain]`},
		{"tck-artifact-file-url-1", `COMPLETED file-url[url:https://example.com/output.txt output.txt text/plain]`},
		{"tck-artifact-data-1", `COMPLETED data[data:{"count":42,"key":"value"}]`},
		{"tck-input-required-1", `INPUT_REQUIRED`},
		{"tck-reject-task-1", `REJECTED "rejected"`},
		{"tck-stream-001-1", `COMPLETED text[text:"Stream hello from TCK"]`},
		{"tck-stream-002-1", `COMPLETED`},
		{"tck-stream-artifact-file-1", `COMPLETED file[raw:"tck" output.txt text/plain]`},
		{"tck-stream-artifact-chunked-1", `COMPLETED chunked[text:"chunk-1 " text:"chunk-2"]`},
		{"test-resubscribe-message-id-1", `COMPLETED`},
		{"tck-something-else", `COMPLETED "Unhandled messageId prefix: tck-something-else"`},
	}
	for _, tt := range tests {
		t.Run(tt.messageID, func(t *testing.T) {
			if got := summary(send(t, url, a2atest.UserMessage(tt.messageID, "hi"))); got != tt.want {
				t.Errorf("task\n got %s\nwant %s", got, tt.want)
			}
		})
	}
}

// tck-message-response answers with a message, not a task.
func TestMessageResponse(t *testing.T) {
	url := startSUT(t)
	var sr spec.StreamResponse
	a2atest.Post(t, url, "SendMessage", a2atest.UserMessage("tck-message-response-1", "hi")).Decode(t, &sr)
	if m, ok := sr.Event.(*spec.Message); !ok || m.Parts[0].Text() != "Direct message response" {
		t.Fatalf("SendMessage answered %#v, want the message", sr.Event)
	}
}

// The streaming scenarios' events come in the scenario's order: the
// chunked artifact's chunks, then the end.
func TestStreamedChunks(t *testing.T) {
	url := startSUT(t)
	evs := a2atest.OpenStream(t, url, "SendStreamingMessage", a2atest.UserMessage("tck-stream-artifact-chunked-2", "hi")).All(t)
	var got []string
	for _, ev := range evs {
		switch e := ev.Decode(t).(type) {
		case *spec.Task:
			got = append(got, "task")
		case *spec.TaskArtifactUpdateEvent:
			got = append(got, fmt.Sprintf("%s%s append=%t last=%t", e.Artifact.ID, parts(e.Artifact.Parts), e.Append, e.LastChunk))
		case *spec.TaskStatusUpdateEvent:
			if len(got) == 0 || got[len(got)-1] != "working" || e.Status.State != spec.TaskStateWorking {
				// The bus's ack of the publish adds a working event of
				// its own, beside the agent's.
				got = append(got, strings.ToLower(strings.TrimPrefix(string(e.Status.State), "TASK_STATE_")))
			}
		}
	}
	want := `task working chunked[text:"chunk-1 "] append=false last=false chunked[text:"chunk-2"] append=true last=true completed`
	if strings.Join(got, " ") != want {
		t.Errorf("events\n got %s\nwant %s", strings.Join(got, " "), want)
	}
}

// A task that asked for input completes with the caller's next message,
// as the TCK's multi-turn tests do.
func TestMultiTurn(t *testing.T) {
	url := startSUT(t)
	first := send(t, url, a2atest.UserMessage("tck-input-required-2", "hi"))
	if first.Status.State != spec.TaskStateInputRequired {
		t.Fatalf("first turn: %s", summary(first))
	}
	next := a2atest.UserMessage("tck-complete-task-2", "more")
	next["message"].(map[string]any)["taskId"] = first.ID
	done := send(t, url, next)
	if got := summary(done); done.ID != first.ID || got != `COMPLETED "Hello from TCK"` {
		t.Fatalf("second turn: task %s, %s", done.ID, got)
	}
}

// startSUT starts a bus, the A2A server with agent "tck" on tck:agent,
// and the agent, with a short long-running scenario; it returns the
// agent's JSON-RPC URL once the agent answers.
func startSUT(t *testing.T) string {
	t.Helper()
	b := bustest.Start(t, nil)
	srv, err := a2a.New(t.Context(), &a2a.Options{
		BusURL: b.URL,
		Agents: []a2a.Agent{{Name: "tck", Topic: "tck:agent", ClientID: "a2a-gw"}},
		Path:   filepath.Join(t.TempDir(), "a2a.db"),
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	h := httptest.NewServer(srv)
	t.Cleanup(func() {
		h.Close()
		srv.Close()
	})

	t.Setenv("BUB_BUS_URL", b.URL)
	t.Setenv("BUB_AGENT_ID", "tck-agent")
	t.Setenv("BUB_DEFAULT_TOPIC", "tck:agent")
	t.Setenv("BUB_TCK_LONG_TASK", "50ms")
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, slog.New(slog.DiscardHandler)) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("run after cancel: %v", err)
		}
	})

	url := h.URL + "/a2a/tck"
	// Up once a task completes: before the agent subscribes, the bus
	// finds nobody on tck:agent and the task fails.
	try := 0
	checkfor.Check(t, a2atest.Timeout, func() error {
		try++
		task := send(t, url, a2atest.UserMessage(fmt.Sprintf("tck-complete-task-ready-%d", try), "ready?"))
		if task.Status.State != spec.TaskStateCompleted {
			return fmt.Errorf("the first task is %s", summary(task))
		}
		return nil
	})
	return url
}

// send is a blocking SendMessage; it returns the task as it is when the
// send returns.
func send(t *testing.T, url string, params map[string]any) *spec.Task {
	t.Helper()
	var sr spec.StreamResponse
	a2atest.Post(t, url, "SendMessage", params).Decode(t, &sr)
	task, ok := sr.Event.(*spec.Task)
	if !ok {
		t.Fatalf("SendMessage answered %T, want a task", sr.Event)
	}
	return task
}

// summary writes a task's state, its status message's text and its
// artifacts, for comparison.
func summary(task *spec.Task) string {
	s := strings.TrimPrefix(string(task.Status.State), "TASK_STATE_")
	if m := task.Status.Message; m != nil && len(m.Parts) > 0 {
		s += fmt.Sprintf(" %q", m.Parts[0].Text())
	}
	for _, art := range task.Artifacts {
		s += " " + string(art.ID) + parts(art.Parts)
	}
	return s
}

// parts writes parts as kind:value, with file names and media types.
func parts(ps spec.ContentParts) string {
	var out []string
	for _, p := range ps {
		var s string
		switch c := p.Content.(type) {
		case spec.Text:
			s = fmt.Sprintf("text:%q", string(c))
		case spec.Raw:
			s = fmt.Sprintf("raw:%q", string(c))
		case spec.URL:
			s = "url:" + string(c)
		case spec.Data:
			b, _ := json.Marshal(c.Value)
			s = "data:" + string(b)
		}
		for _, extra := range []string{p.Filename, p.MediaType} {
			if extra != "" {
				s += " " + extra
			}
		}
		out = append(out, s)
	}
	return "[" + strings.Join(out, " ") + "]"
}
