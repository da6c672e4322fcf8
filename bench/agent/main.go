// Command agent is the smallest agent the spawner can start, for the
// harness's spawn-to-first-delivery scenario (docs/BENCHMARKS.md).
//
// It reads its bus environment (BUB_BUS_URL, BUB_AGENT_ID,
// BUB_DEFAULT_TOPIC) with peer.DialEnv, subscribes its default topic, and
// notes the time its first processMessage arrives. It answers that
// delivery processed, publishes
//
//	{"type":"bench_spawned","topic":"<the delivery's topic>","at":<unix ns>}
//
// to BENCH_REPORT_TOPIC (which it inherits from the spawner's
// environment), and exits 0. Timing is taken in the handler, before the
// report is sent, so the report's own trip is not in the figure; the
// harness runs on the same machine, so the clocks agree.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/bub-bus/bub/peer"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "bench agent: %v\n", err)
		os.Exit(1)
	}
}

// first is the first delivery the agent saw.
type first struct {
	topic string
	at    int64
}

// spawned is the report's payload.
type spawned struct {
	Type  string `json:"type"`
	Topic string `json:"topic"`
	At    int64  `json:"at"`
}

func run(ctx context.Context) error {
	env := peer.FromEnv()
	report := os.Getenv("BENCH_REPORT_TOPIC")
	if env.DefaultTopic == "" || report == "" {
		return errors.New("BUB_DEFAULT_TOPIC and BENCH_REPORT_TOPIC must be set")
	}
	arrived := make(chan first, 1)
	var once sync.Once
	handle := func(_ context.Context, d *peer.Delivery) (peer.Result, error) {
		at := time.Now().UnixNano()
		once.Do(func() { arrived <- first{d.Topic, at} })
		return peer.Result{Processed: true}, nil
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	conn, err := peer.DialEnv(ctx, handle, &peer.Options{Logger: log})
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.Subscribe(ctx, env.DefaultTopic, handle, nil); err != nil {
		return err
	}
	select {
	case f := <-arrived:
		_, err := conn.SendMessage(ctx, report, spawned{Type: "bench_spawned", Topic: f.topic, At: f.at}, nil)
		return err
	case <-ctx.Done():
		return nil
	case <-conn.Done():
		return conn.Err()
	}
}
