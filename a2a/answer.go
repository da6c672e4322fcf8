package a2a

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	spec "github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/bub-bus/bub/peer"
)

// This file is the agent's side: helpers for a bus agent that answers
// A2A tasks with more than a chat reply (docs/A2A.md, "The agent's
// answers").

// TaskOf reads the A2A side of a delivery: the Payload the A2A server
// published, or ok false for a message that is not one.
func TaskOf(d *peer.Delivery) (p *Payload, ok bool) {
	var pl Payload
	if json.Unmarshal(d.Payload, &pl) != nil || pl.A2A.TaskID == "" || pl.ReplyTo != replyTopic(pl.A2A.TaskID) {
		return nil, false
	}
	return &pl, true
}

// ErrAnswerRefused is returned when the A2A server did not take an
// answer: the task is unknown (expired), or the answer was bad.
var ErrAnswerRefused = errors.New("a2a: answer refused")

// SendStatus moves p's task to state (working, input-required,
// auth-required, completed, failed, rejected, canceled) with text as
// the agent's message ("" for none), through conn.
func SendStatus(ctx context.Context, conn *peer.Conn, p *Payload, state spec.TaskState, text string) error {
	ans := map[string]any{"type": TypeStatus, "state": string(state)}
	if text != "" {
		ans["text"] = text
	}
	return answerTask(ctx, conn, p, ans)
}

// SendDirectMessage answers p's message with a message rather than a
// task (text as its one part): the task completes with it, and the
// caller's blocking SendMessage gets the message itself.
func SendDirectMessage(ctx context.Context, conn *peer.Conn, p *Payload, text string) error {
	return answerTask(ctx, conn, p, map[string]any{"type": TypeMessage, "text": text})
}

// SendArtifact adds art to p's task, or with appending adds its parts to
// the artifact of the same id; last says it is the artifact's last
// chunk.
func SendArtifact(ctx context.Context, conn *peer.Conn, p *Payload, art *spec.Artifact, appending, last bool) error {
	return answerTask(ctx, conn, p, map[string]any{"type": TypeArtifact, "artifact": art, "append": appending, "lastChunk": last})
}

// answerTask publishes ans on p's reply topic and checks that the A2A
// server took it.
func answerTask(ctx context.Context, conn *peer.Conn, p *Payload, ans map[string]any) error {
	res, err := conn.SendMessage(ctx, p.ReplyTo, ans, nil)
	if err != nil {
		return err
	}
	for _, ack := range res.Acks {
		switch {
		case ack.Processed, ack.Held, ack.Retrying:
			return nil // taken, or kept for an A2A server that is away
		case ack.DeadLetter != "":
			return fmt.Errorf("%w: task %s: %s", ErrAnswerRefused, p.A2A.TaskID, ack.Message)
		}
	}
	if res.Held {
		return nil
	}
	return fmt.Errorf("%w: task %s: no A2A server took the answer on %s", ErrAnswerRefused, p.A2A.TaskID, p.ReplyTo)
}
