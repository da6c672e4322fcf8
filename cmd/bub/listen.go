package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/bub-bus/bub/peer"
	"github.com/bub-bus/bub/protocol"
)

func init() {
	register("listen", "subscribe to a topic pattern and print each delivery as a JSON line", runListen)
}

// listenConfig is bub listen's flags.
type listenConfig struct {
	client clientFlags
	topic  string
	policy string
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

func runListen(ctx context.Context, io stdio, args []string) int {
	var cfg listenConfig
	fs := newFlagSet(io, "listen", "listen --topic PATTERN [flags]\n\n"+
		"Subscribes to PATTERN and prints each delivery as one JSON line on stdout,\n"+
		"answering processed: true, until interrupted. Logs go to stderr.")
	cfg.client.addFlags(fs)
	fs.StringVar(&cfg.topic, "topic", "", "topic pattern to subscribe to: exact, a prefix ending in ':' or '-', or a glob such as 'inbound:*'")
	fs.StringVar(&cfg.policy, "policy", "", "propagation policy: stopPropagationOnProcessed, stopPropagationOnStop or continueAll (default: the bus's)")
	if code, ok := parseFlags(fs, io, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return usagef(io, "listen", "unexpected argument %q", fs.Arg(0))
	}
	if cfg.topic == "" {
		return usagef(io, "listen", "no pattern: pass --topic")
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
		return peer.Result{Processed: true}, nil
	}
	if err := conn.Subscribe(ctx, cfg.topic, printDelivery, &peer.SubscribeOptions{Policy: protocol.Policy(cfg.policy)}); err != nil {
		return errorf(io, "listen: %v", err)
	}

	select {
	case <-ctx.Done():
		return 0
	case err := <-failed:
		return errorf(io, "listen: %v", err)
	case <-conn.Done():
		return errorf(io, "listen: %v", conn.Err())
	}
}
