package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/bub-bus/bub/peer"
	"github.com/bub-bus/bub/protocol"
)

func init() {
	register("send-message", "publish one message and print the subscribers' acks as JSON", runSendMessage)
}

// sendMessageConfig is bub send-message's flags.
type sendMessageConfig struct {
	client  clientFlags
	topic   string
	payload string
	timeout time.Duration
}

func runSendMessage(ctx context.Context, io stdio, args []string) int {
	var cfg sendMessageConfig
	fs := newFlagSet(io, "send-message", "send-message --topic TOPIC --payload @FILE|-|JSON [flags]\n\n"+
		"Publishes one message and prints the bus's result, {success, messageId, acks}, as one JSON line.\n"+
		"Exit status: 0 when a subscriber processed the message, or the bus holds it for one (agent:* topics) or retries it;\n"+
		"1 when it was not sent, reached nobody, or its outcome is unknown; 2 on a usage error;\n"+
		fmt.Sprintf("%d when the bus accepted it but dead-lettered it at once (a subscriber rejected it, or the bus refused to call a webhook):\n", exitDeadLettered)+
		"stderr then names the dead letter and the commands that show it (bub dlq show, bub trace); stdout keeps the JSON result either way.")
	cfg.client.addFlags(fs)
	fs.StringVar(&cfg.topic, "topic", "", "topic to publish to (default: $BUB_DEFAULT_TOPIC)")
	fs.StringVar(&cfg.payload, "payload", "", `the message, a JSON object with a string "type": @FILE reads a file, - reads stdin, anything else is the JSON itself`)
	fs.DurationVar(&cfg.timeout, "timeout", 0, fmt.Sprintf("how long to wait for the bus and every subscriber to answer (default: the bus's delivery timeout plus %s, so that a slow subscriber's timeout reaches us as an ack with retrying: true; add one delivery timeout per further subscriber of a continueAll chain)", answerMargin))
	if code, ok := parseFlags(fs, io, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return usagef(io, "send-message", "unexpected argument %q; quote the payload and pass it with --payload", fs.Arg(0))
	}
	if cfg.topic == "" {
		cfg.topic = os.Getenv("BUB_DEFAULT_TOPIC")
	}
	if cfg.topic == "" {
		return usagef(io, "send-message", "no topic: pass --topic or set BUB_DEFAULT_TOPIC")
	}
	if cfg.payload == "" {
		return usagef(io, "send-message", "no payload: pass --payload @FILE, - or the JSON itself")
	}
	payload, err := readPayload(io, cfg.payload)
	if err != nil {
		return errorf(io, "send-message: %v", err)
	}

	// The connection and initialize get --timeout, or dialTimeout; the
	// wait for the answer is only known once the bus has said how long
	// it waits for a subscriber.
	dialCtx, cancelDial := context.WithTimeout(ctx, cmp.Or(cfg.timeout, dialTimeout))
	defer cancelDial()
	// One call, so a dropped connection is reported rather than retried.
	// The call is bounded by the context below, not by CallTimeout.
	conn, err := cfg.client.dial(dialCtx, io, peer.Options{CallTimeout: 24 * time.Hour, NoReconnect: true, PublishOnly: true})
	if err != nil && ctx.Err() != nil {
		return errorf(io, "send-message: interrupted while connecting to the bus; nothing was sent")
	}
	if err != nil {
		return errorf(io, "send-message: %v", err)
	}
	defer conn.Close()
	wait := cfg.timeout
	if wait == 0 {
		wait = answerTimeout(conn.Limits())
	}
	sendCtx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	result, err := conn.SendMessage(sendCtx, cfg.topic, payload, nil)
	if err != nil && sendCtx.Err() != nil {
		// The bus may have routed the message, may be retrying it or
		// may dead-letter it: say so rather than report a failure.
		why := fmt.Sprintf("no answer from the bus within %s", wait)
		if ctx.Err() != nil {
			why = "interrupted before the bus answered"
		}
		return errorf(io, "send-message: %s, so the outcome is unknown: the message to %q may have been delivered, may be being retried, or may end in the dead-letter queue. "+
			"Find its story with 'bub tail --topic %s --since 10m' (then 'bub trace MESSAGE_ID'), the dead letters with 'bub dlq list --topic %s'; wait longer with --timeout", why, cfg.topic, cfg.topic, cfg.topic)
	}
	if err != nil {
		return errorf(io, "send-message: %v", err)
	}
	line, err := json.Marshal(result)
	if err != nil {
		return errorf(io, "send-message: %v", err)
	}
	if _, err := fmt.Fprintf(io.out, "%s\n", line); err != nil {
		return errorf(io, "send-message: write result: %v", err)
	}
	if result.Held {
		// Accepted: the bus keeps it and delivers it when a subscriber
		// appears, or dead-letters it.
		fmt.Fprintf(io.err, "bub send-message: held: nobody subscribes to %q yet; the bus delivers message %s when a subscriber appears, or dead-letters it at %s (its hold lifetime)\n", cfg.topic, result.MessageID, result.NextAttempt)
		return 0
	}
	if result.Success {
		// Accepted, and the bus owns the rest: say who it is retrying.
		for _, a := range result.Acks {
			if a.Retrying {
				why := cmp.Or(a.Error, a.Message, "asked for a retry")
				fmt.Fprintf(io.err, "bub send-message: retrying: %s did not process message %s (%s); the bus tries again (attempt %d) at %s\n", a.ClientID, result.MessageID, why, a.Attempt, a.NextAttempt)
			}
		}
	}
	if dead := deadLettered(result.Acks); len(dead) > 0 {
		// Accepted, but not delivered: a script must not read this as
		// success, and a person needs the id to look at it.
		for _, a := range dead {
			why := cmp.Or(a.Message, a.Error, "rejected")
			fmt.Fprintf(io.err, "bub send-message: dead-lettered: %s refused message %s (%s); the bus keeps it as %s: see it with 'bub dlq show %s', its story with 'bub trace %s'\n",
				a.ClientID, result.MessageID, why, a.DeadLetter, a.DeadLetter, result.MessageID)
		}
		return exitDeadLettered
	}
	if !result.Success {
		reason := result.Reason
		if reason == protocol.ReasonNoSubscribers {
			reason = "no subscriber"
		}
		return errorf(io, "send-message: %s for %q (message %s)", reason, cfg.topic, result.MessageID)
	}
	return 0
}

// exitDeadLettered is send-message's exit status when the bus accepted
// the message and dead-lettered it in the same pass: distinct from 1 (not
// sent, or reached nobody), so that a script can tell "look in the
// dead-letter queue" from "try again".
const exitDeadLettered = 3

// deadLettered returns the acks whose delivery the bus dead-lettered in
// the pass: a reject, or a webhook the bus refused to call. The bus makes
// one only when no subscriber of the pass processed the message.
func deadLettered(acks []protocol.Ack) []protocol.Ack {
	var dead []protocol.Ack
	for _, a := range acks {
		if a.DeadLetter != "" {
			dead = append(dead, a)
		}
	}
	return dead
}

// answerMargin is how much longer than the bus send-message waits, so
// that the bus's own timeout, and the ack that reports it, comes first.
const answerMargin = 5 * time.Second

// dialTimeout bounds connecting and initialize when --timeout is unset.
const dialTimeout = 30 * time.Second

// answerTimeout is the default wait for sendMessage's answer: the bus's
// delivery timeout plus answerMargin; for a bus that does not announce
// its limits, its default delivery timeout (30s) plus answerMargin.
func answerTimeout(l protocol.Limits) time.Duration {
	d := time.Duration(l.DeliveryTimeoutMs) * time.Millisecond
	if d <= 0 {
		d = 30 * time.Second
	}
	return d + answerMargin
}

// readPayload reads the --payload argument and checks that it is a JSON
// object with a string type, so a bad file is reported before connecting.
func readPayload(io stdio, arg string) (json.RawMessage, error) {
	var data []byte
	var err error
	source := "--payload"
	switch {
	case arg == "-":
		source = "stdin"
		data, err = readAll(io.in)
	case strings.HasPrefix(arg, "@"):
		source = arg[1:]
		data, err = os.ReadFile(source)
	default:
		data = []byte(arg)
	}
	if err != nil {
		return nil, fmt.Errorf("read payload from %s: %w", source, err)
	}
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, fmt.Errorf("payload from %s is not valid JSON: %w", source, err)
	}
	if _, err := protocol.PayloadType(data); err != nil {
		return nil, fmt.Errorf("payload from %s: %w", source, err)
	}
	return data, nil
}

func readAll(r io.Reader) ([]byte, error) {
	if r == nil {
		return nil, errors.New("no stdin")
	}
	return io.ReadAll(r)
}
