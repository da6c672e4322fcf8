package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/bub-bus/bub/peer"
	"github.com/bub-bus/bub/protocol"
)

func init() {
	register("listen", "subscribe to a topic pattern and print each delivery as a JSON line", runListen)
}

// listenConfig is bub listen's flags.
type listenConfig struct {
	client       clientFlags
	topic        string
	policy       string
	reply        string
	retrySeconds float64
}

// The answers bub listen can give every delivery, for trying retries
// and the dead-letter queue from a shell.
const (
	replyProcessed = "processed"
	replyRetry     = "retry"
	replyReject    = "reject"
)

// maxRetrySeconds is the largest --retry-seconds: a day.
const maxRetrySeconds = 24 * 60 * 60

// result is the answer --reply and --retry-seconds ask for, or a usage
// error saying what was wrong with them.
func (cfg *listenConfig) result() (peer.Result, error) {
	switch cfg.reply {
	case replyProcessed, replyReject:
		if cfg.retrySeconds != 0 {
			return peer.Result{}, fmt.Errorf("--retry-seconds goes with --reply retry, not --reply %s", cfg.reply)
		}
		if cfg.reply == replyReject {
			return peer.Result{Reject: true, Message: "rejected by bub listen --reply reject"}, nil
		}
		return peer.Result{Processed: true}, nil
	case replyRetry:
		// !(x <= max) refuses NaN too; a day is far beyond any bus's
		// --retry-delay-cap, and a larger value would overflow a
		// time.Duration.
		if cfg.retrySeconds < 0 || !(cfg.retrySeconds <= maxRetrySeconds) {
			return peer.Result{}, fmt.Errorf("--retry-seconds %v: want 0 (the bus's backoff) to %d (a day; the bus caps it at its --retry-delay-cap anyway)", cfg.retrySeconds, maxRetrySeconds)
		}
		return peer.Result{ShouldRetry: true, RetryAfter: time.Duration(cfg.retrySeconds * float64(time.Second)), Message: "retry asked by bub listen --reply retry"}, nil
	}
	return peer.Result{}, fmt.Errorf("--reply %q: want processed, retry or reject", cfg.reply)
}

// deliveryLine is what bub listen prints for each delivery.
type deliveryLine struct {
	Topic        string          `json:"topic"`
	Subscription string          `json:"subscription"`
	MessageID    string          `json:"messageId"`
	From         string          `json:"from"`
	Attempt      int             `json:"attempt"`
	Payload      json.RawMessage `json:"payload"`
	Meta         json.RawMessage `json:"meta,omitempty"`
}

// describeAnswer says what a delivery is answered, in the wire's words.
func describeAnswer(r peer.Result) string {
	switch {
	case r.ShouldRetry && r.RetryAfter > 0:
		return fmt.Sprintf("should_retry: true, retry_seconds: %g", r.RetryAfter.Seconds())
	case r.ShouldRetry:
		return "should_retry: true"
	case r.Reject:
		return "reject: true"
	}
	return "processed: true"
}

func runListen(ctx context.Context, io stdio, args []string) int {
	var cfg listenConfig
	fs := newFlagSet(io, "listen", "listen --topic PATTERN [--reply processed|retry|reject] [flags]\n\n"+
		"Subscribes to PATTERN and prints each delivery as one JSON line on stdout,\n"+
		"answering each as --reply says, until interrupted. Once subscribed it says so\n"+
		"in one line on stderr, where logs go too.")
	cfg.client.addFlags(fs)
	cfg.client.addReconnectFlags(fs)
	fs.StringVar(&cfg.topic, "topic", "", "topic pattern to subscribe to: exact, a prefix ending in ':' or '-', or a glob such as 'inbound:*'")
	fs.StringVar(&cfg.policy, "policy", "", "propagation policy: stopPropagationOnProcessed, stopPropagationOnStop or continueAll (default: the bus's)")
	fs.StringVar(&cfg.reply, "reply", replyProcessed, "how to answer every delivery: processed; retry (should_retry: the bus delivers it again later, and dead-letters it after --max-attempts); reject (reject: true, a final refusal: the bus dead-letters it at once with reason rejected)")
	fs.Float64Var(&cfg.retrySeconds, "retry-seconds", 0, "with --reply retry, the retry_seconds to ask for (0: the bus's backoff); at most 86400")
	if code, ok := parseFlags(fs, io, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return usagef(io, "listen", "unexpected argument %q", fs.Arg(0))
	}
	if cfg.topic == "" {
		return usagef(io, "listen", "no pattern: pass --topic")
	}
	answer, err := cfg.result()
	if err != nil {
		return usageError(io, fs, "%v", err)
	}

	conn, err := cfg.client.dial(ctx, io, peer.Options{})
	if err != nil {
		return errorf(io, "listen: %v", err)
	}
	defer conn.Close()

	// A failed write to stdout (a closed pipe) ends the command; the
	// delivery that hit it is answered with the error.
	failed := make(chan error, 1)
	var mu sync.Mutex // one line at a time on stdout
	printDelivery := func(_ context.Context, d *peer.Delivery) (peer.Result, error) {
		line, err := json.Marshal(deliveryLine{
			Topic: d.Topic, Subscription: d.Subscription, MessageID: d.MessageID,
			From: d.From, Attempt: d.Attempt, Payload: d.Payload, Meta: d.Meta,
		})
		if err != nil {
			return peer.Result{}, err
		}
		mu.Lock()
		_, err = io.out.Write(append(line, '\n'))
		mu.Unlock()
		if err != nil {
			err = fmt.Errorf("write stdout: %w", err)
			select {
			case failed <- err:
			default:
			}
			return peer.Result{}, err
		}
		return answer, nil
	}
	if err := conn.Subscribe(ctx, cfg.topic, printDelivery, &peer.SubscribeOptions{Policy: protocol.Policy(cfg.policy)}); err != nil {
		return errorf(io, "listen: %v", err)
	}
	// Said once the bus has confirmed the subscription, so that a script
	// or a person knows when publishing to it starts to reach it.
	fmt.Fprintf(io.err, "bub listen: subscribed to %q as %s; each delivery is a line on stdout, answered %s\n", cfg.topic, conn.ClientID(), describeAnswer(answer))

	select {
	case <-ctx.Done():
		return 0
	case err := <-failed:
		return errorf(io, "listen: %v", err)
	case <-conn.Done():
		return errorf(io, "listen: %v", endedHint(conn.Err()))
	}
}
