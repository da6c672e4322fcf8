package a2atest

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"testing"
	"time"

	spec "github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/bub-bus/bub/a2a"
	"github.com/bub-bus/bub/internal/checkfor"
	"github.com/bub-bus/bub/peer"
)

// Agent is an A2A-aware agent on the bus: it hands each message it gets
// to the test, which answers on the message's reply_to with Say.
type Agent struct {
	Conn *peer.Conn
	got  chan a2a.Payload
}

// StartAgent connects an agent as clientID (with token, "" for none)
// and subscribes it to topic; it closes when the test ends.
func StartAgent(t testing.TB, busURL, clientID, token, topic string) *Agent {
	t.Helper()
	conn, err := peer.Dial(t.Context(), busURL, &peer.Options{ClientID: clientID, Token: token, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	a := &Agent{Conn: conn, got: make(chan a2a.Payload, 16)}
	err = conn.Subscribe(t.Context(), topic, func(_ context.Context, d *peer.Delivery) (peer.Result, error) {
		var p a2a.Payload
		if err := d.Decode(&p); err != nil {
			return peer.Result{}, err
		}
		a.got <- p
		return peer.Result{Processed: true}, nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// Next waits for the agent's next message.
func (a *Agent) Next(t testing.TB) a2a.Payload {
	t.Helper()
	select {
	case p := <-a.got:
		return p
	case <-time.After(Timeout):
		t.Fatalf("the agent got no message within %v", Timeout)
		return a2a.Payload{}
	}
}

// TaskOf waits for the agent's next message and checks that it belongs
// to task.
func (a *Agent) TaskOf(t testing.TB, task *spec.Task) a2a.Payload {
	t.Helper()
	p := a.Next(t)
	if p.CorrelationID != string(task.ID) || p.A2A.TaskID != task.ID || p.ConversationID != task.ContextID {
		t.Fatalf("the agent got %+v, want a message of task %s", p, task.ID)
	}
	return p
}

// Say publishes answer on p's reply_to and checks that the A2A server
// took it.
func (a *Agent) Say(t testing.TB, p a2a.Payload, answer map[string]any) {
	t.Helper()
	res, err := a.Conn.SendMessage(t.Context(), p.ReplyTo, answer, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Acks) != 1 || !res.Acks[0].Processed {
		t.Fatalf("answer %v to %s not processed: %+v", answer, p.ReplyTo, res)
	}
}

// StartWorking sends a message of text with messageId id to the agent at
// url on a stream, has a answer it with a working status "drafting", and
// returns the task, the message a got, and the id of that status's
// event; the stream is closed then, as by a client that lost it.
func (a *Agent) StartWorking(t testing.TB, url, id, text string) (*spec.Task, a2a.Payload, uint64) {
	t.Helper()
	s := OpenStream(t, url, "SendStreamingMessage", UserMessage(id, text))
	defer s.Close()
	first, ok := s.Next(t)
	task, isTask := first.Decode(t).(*spec.Task)
	if !ok || !isTask {
		t.Fatalf("first event of the stream on %s: %+v", url, first)
	}
	p := a.TaskOf(t, task)
	a.Say(t, p, map[string]any{"type": "a2a_status", "state": "working", "text": "drafting"})
	return task, p, s.UntilStatusText(t, "drafting")
}

// FollowElsewhere checks that task is working when read at url (another
// node's door than the one it was sent to), resumes its stream there
// after event last, has a add an artifact "draft", and returns the
// stream and the artifact's event id, checking that the stream got it
// next.
func (a *Agent) FollowElsewhere(t testing.TB, url string, task *spec.Task, p a2a.Payload, last uint64) (*Stream, uint64) {
	t.Helper()
	var got spec.Task
	Post(t, url, "GetTask", map[string]any{"id": task.ID}).Decode(t, &got)
	if got.ID != task.ID || got.Status.State != spec.TaskStateWorking {
		t.Fatalf("GetTask at %s: %s %s, want %s working", url, got.ID, got.Status.State, task.ID)
	}
	follow := OpenStream(t, url, "SubscribeToTask", map[string]any{"id": task.ID}, "Last-Event-ID", strconv.FormatUint(last, 10))
	a.Say(t, p, map[string]any{"type": "a2a_artifact", "artifact": map[string]any{"artifactId": "draft", "parts": []any{map[string]any{"text": "part one"}}}})
	ev, ok := follow.Next(t)
	if art, isArt := ev.Decode(t).(*spec.TaskArtifactUpdateEvent); !ok || !isArt || ev.ID != last+1 || art.Artifact.ID != "draft" {
		t.Fatalf("the stream at %s after event %d: %+v, want the artifact", url, last, ev)
	}
	return follow, ev.ID
}

// CompleteAfterDeath has a answer p's task completed, again until a
// server takes the answer (within timeout): just after a node's death
// the answers may still go to that node's A2A server, whose delivery
// fails. It checks that follow, a stream of the task open across the
// death, gets the completion as the event after last, and ends.
func (a *Agent) CompleteAfterDeath(t testing.TB, p a2a.Payload, follow *Stream, last uint64, timeout time.Duration) {
	t.Helper()
	checkfor.Check(t, timeout, func() error {
		res, err := a.Conn.SendMessage(t.Context(), p.ReplyTo, map[string]any{"type": "a2a_status", "state": "completed", "text": "done"}, nil)
		if err != nil {
			return err
		}
		if len(res.Acks) != 1 || !res.Acks[0].Processed {
			return fmt.Errorf("the answer after the death was acked %+v", res.Acks)
		}
		return nil
	})
	rest := follow.All(t)
	if len(rest) != 1 || rest[0].ID != last+1 {
		t.Fatalf("the stream after the death: %+v, want the one event after %d", rest, last)
	}
	if su, ok := rest[0].Decode(t).(*spec.TaskStatusUpdateEvent); !ok || su.Status.State != spec.TaskStateCompleted {
		t.Fatalf("the stream ended with %+v, want completed", rest[0].Decode(t))
	}
}
