package a2atest

import (
	"context"
	"log/slog"
	"testing"
	"time"

	spec "github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/bub-bus/bub/a2a"
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
