package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	spec "github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/bub-bus/bub/a2a"
	"github.com/bub-bus/bub/peer"
)

// step is one thing a scenario does to its task, in order.
type step struct {
	// state, when set, is a status update to that state, with text as
	// the agent's message ("" for none).
	state spec.TaskState
	text  string
	// direct answers with text as a message rather than a task.
	direct bool
	// artifact, when set, is an artifact update; appending adds its
	// parts to the artifact of the same id, last marks its last chunk.
	artifact        *spec.Artifact
	appending, last bool
	// longWait makes the agent work BUB_TCK_LONG_TASK before the next
	// step.
	longWait bool
}

// scenario is what the agent does for a message whose id starts with
// prefix: the TCK's scenarios/core_operations.feature and
// streaming.feature, one for one.
type scenario struct {
	prefix string
	steps  []step
}

// working and completed are the scenarios' most common steps.
var (
	working   = step{state: spec.TaskStateWorking}
	completed = step{state: spec.TaskStateCompleted}
)

// textArtifact is an artifact of one text part.
func textArtifact(id, text string) *spec.Artifact {
	return &spec.Artifact{ID: spec.ArtifactID(id), Parts: spec.ContentParts{spec.NewTextPart(text)}}
}

// fileArtifact is the scenarios' output.txt, its bytes inline.
func fileArtifact() *spec.Artifact {
	p := spec.NewRawPart([]byte("tck"))
	p.Filename, p.MediaType = "output.txt", "text/plain"
	return &spec.Artifact{ID: "file", Parts: spec.ContentParts{p}}
}

// fileURLArtifact is the scenarios' output.txt, by URL.
func fileURLArtifact() *spec.Artifact {
	p := spec.NewFileURLPart("https://example.com/output.txt", "text/plain")
	p.Filename = "output.txt"
	return &spec.Artifact{ID: "file-url", Parts: spec.ContentParts{p}}
}

// scenarios are the TCK's, by message id prefix; the longest prefix
// that matches wins (tck-artifact-file-url over tck-artifact-file).
var scenarios = []scenario{
	{"tck-complete-task", []step{{state: spec.TaskStateCompleted, text: "Hello from TCK"}}},
	{"tck-artifact-text", []step{{artifact: textArtifact("text", "Generated text content")}, completed}},
	{"tck-artifact-file", []step{{artifact: fileArtifact()}, completed}},
	{"tck-artifact-file-url", []step{{artifact: fileURLArtifact()}, completed}},
	{"tck-artifact-data", []step{{artifact: &spec.Artifact{ID: "data", Parts: spec.ContentParts{
		spec.NewDataPart(map[string]any{"key": "value", "count": 42}),
	}}}, completed}},
	{"tck-message-response", []step{{direct: true, text: "Direct message response"}}},
	{"tck-input-required", []step{{state: spec.TaskStateInputRequired}}},
	{"tck-reject-task", []step{{state: spec.TaskStateRejected, text: "rejected"}}},

	{"tck-stream-001", []step{working, {artifact: textArtifact("text", "Stream hello from TCK")}, completed}},
	{"tck-stream-002", []step{completed}},
	{"tck-stream-003", []step{working, {artifact: textArtifact("text", "Stream task lifecycle")}, completed}},
	{"tck-stream-ordering-001", []step{working, {artifact: textArtifact("text", "Ordered output")}, completed}},
	{"tck-stream-artifact-text", []step{working, {artifact: textArtifact("text", "Streamed text content")}, completed}},
	{"tck-stream-artifact-file", []step{working, {artifact: fileArtifact()}, completed}},
	{"tck-stream-artifact-chunked", []step{
		working,
		{artifact: textArtifact("chunked", "chunk-1 ")},
		{artifact: textArtifact("chunked", "chunk-2"), appending: true, last: true},
		completed,
	}},
	{"test-resubscribe-message-id", []step{working, {longWait: true}, completed}},
}

// scenarioFor returns the scenario of a message id: the one with the
// longest matching prefix, or, for any other id, completing the task
// with a message that names the id, as the TCK's own SUTs do.
func scenarioFor(messageID string) scenario {
	best := scenario{steps: []step{{state: spec.TaskStateCompleted, text: "Unhandled messageId prefix: " + messageID}}}
	for _, s := range scenarios {
		if strings.HasPrefix(messageID, s.prefix) && len(s.prefix) > len(best.prefix) {
			best = s
		}
	}
	return best
}

// agent plays the scenarios.
type agent struct {
	log      *slog.Logger
	longTask time.Duration
}

// handle answers one delivery: an A2A task's message gets its
// scenario's answers, each taken by the A2A server before the next is
// sent, so that the task's stream has them in order.
func (a *agent) handle(ctx context.Context, d *peer.Delivery) (peer.Result, error) {
	if d.Type() == a2a.TypeCancel {
		// The A2A server has canceled the task already; there is no
		// work of ours to stop.
		return peer.Result{Processed: true, Message: "nothing to cancel"}, nil
	}
	p, ok := a2a.TaskOf(d)
	if !ok || p.A2A.Message == nil {
		return peer.Result{Message: fmt.Sprintf("a2a-tck-agent takes A2A tasks only, not %q", d.Type())}, nil
	}
	sc := scenarioFor(p.A2A.Message.ID)
	a.log.Info("task", "task_id", p.A2A.TaskID, "message_id", p.A2A.Message.ID, "scenario", sc.prefix)
	for _, st := range sc.steps {
		if err := a.play(ctx, d.Conn, p, st); err != nil {
			// Not processed: the bus delivers the message again, and
			// the scenario plays again; the A2A server ignores answers
			// to a task that finished meanwhile.
			return peer.Result{}, fmt.Errorf("task %s, scenario %q: %w", p.A2A.TaskID, sc.prefix, err)
		}
	}
	return peer.Result{Processed: true, Message: "played " + sc.prefix}, nil
}

// play does one step.
func (a *agent) play(ctx context.Context, conn *peer.Conn, p *a2a.Payload, st step) error {
	switch {
	case st.longWait:
		t := time.NewTimer(a.longTask)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	case st.direct:
		return a2a.SendDirectMessage(ctx, conn, p, st.text)
	case st.artifact != nil:
		return a2a.SendArtifact(ctx, conn, p, st.artifact, st.appending, st.last)
	default:
		return a2a.SendStatus(ctx, conn, p, st.state, st.text)
	}
}
