// Command clustercheck puts a bounded load through a bub cluster and
// accounts for every message afterwards; deploy/cluster-test.sh runs it
// while it kills, partitions and restarts the nodes (make cluster-test,
// docs/CLUSTER.md "Running it with Docker").
//
// A subscriber records every messageId it is delivered; publishers send
// -messages load messages over -duration to a held topic, each again
// until the bus accepts it (a messageId in the answer: delivered,
// retrying or held), so a publish refused or lost while a node is down
// does not count. Once the load is sent it waits, up to -drain, until
// every accepted id was delivered or dead-lettered (dlq.list), then
// prints the account. With -wait-calm the drain is counted from SIGUSR1
// as well (cluster-test.sh sends it once its kills, cuts and restarts
// are over): on a slow host they may outlast the load, and a message
// must be delivered once the cluster is whole, not while a node it
// waits for is still restarting. It exits 1 when an accepted id vanished or a load
// message was never accepted, 2 on a usage error.
//
//	clustercheck -bus-url ws://127.0.0.1:PORT1/,ws://127.0.0.1:PORT2/ [flags]
//
// BUB_BUS_URL and BUB_TOKEN are read as bub's commands read them.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/bub-bus/bub/peer"
	"github.com/bub-bus/bub/protocol"
)

type config struct {
	busURL   string
	token    string
	topic    string
	messages int
	duration time.Duration
	workers  int
	drain    time.Duration
	waitCalm bool
	jsonOut  string
}

func main() {
	var cfg config
	fs := flag.NewFlagSet("clustercheck", flag.ContinueOnError)
	fs.StringVar(&cfg.busURL, "bus-url", os.Getenv("BUB_BUS_URL"), "comma-separated WebSocket URLs of the nodes (env BUB_BUS_URL)")
	fs.StringVar(&cfg.token, "token", os.Getenv("BUB_TOKEN"), "bearer token of an identity that may publish and subscribe the topic and call dlq.list (env BUB_TOKEN)")
	fs.StringVar(&cfg.topic, "topic", "agent:loadtest", "topic of the load; a held one (--hold-patterns), so that nothing is dropped while the subscriber reconnects")
	fs.IntVar(&cfg.messages, "messages", 2000, "load messages to publish")
	fs.DurationVar(&cfg.duration, "duration", 60*time.Second, "time the load is spread over")
	fs.IntVar(&cfg.workers, "workers", 8, "publishes in flight at once, so that one slow delivery does not stall the pace")
	fs.DurationVar(&cfg.drain, "drain", 60*time.Second, "after the load, how long accepted messages get to be delivered or dead-lettered")
	fs.BoolVar(&cfg.waitCalm, "wait-calm", false, "count -drain from SIGUSR1 too, sent once the disruptions are over, not from the load's end alone")
	fs.StringVar(&cfg.jsonOut, "json", "", "also write the account as JSON to this file")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if cfg.busURL == "" || cfg.messages < 1 || cfg.workers < 1 || cfg.duration <= 0 {
		fmt.Fprintln(os.Stderr, "clustercheck: give -bus-url (or BUB_BUS_URL), and positive -messages, -workers and -duration")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	calm := make(chan struct{})
	if cfg.waitCalm {
		usr1 := make(chan os.Signal, 1)
		signal.Notify(usr1, syscall.SIGUSR1)
		go func() {
			<-usr1
			log.Info("told the disruptions are over; the drain counts from now or the load's end")
			close(calm)
		}()
	} else {
		close(calm)
	}
	a, err := run(ctx, cfg, calm, log)
	if err != nil {
		fmt.Fprintf(os.Stderr, "clustercheck: %v\n", err)
		os.Exit(1)
	}
	a.print(os.Stdout)
	if cfg.jsonOut != "" {
		data, _ := json.MarshalIndent(a, "", "  ")
		if err := os.WriteFile(cfg.jsonOut, data, 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "clustercheck: write %s: %v\n", cfg.jsonOut, err)
		}
	}
	if !a.ok() {
		fmt.Println("clustercheck: FAIL")
		os.Exit(1)
	}
	fmt.Println("clustercheck: PASS")
}

// loadPayload is one load message.
type loadPayload struct {
	Type string `json:"type"`
	Seq  int    `json:"seq"`
}

// counters are the publishers' tallies, for progress and the summary.
type counters struct {
	accepted, held, retrying, refused, unknown atomic.Int64
}

func run(ctx context.Context, cfg config, calm <-chan struct{}, log *slog.Logger) (*account, error) {
	urls := strings.Split(cfg.busURL, ",")
	for i := range urls {
		urls[i] = strings.TrimSpace(urls[i])
	}
	peerLog := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	opts := peer.Options{
		Token:        cfg.token,
		CallTimeout:  20 * time.Second,
		ReconnectMin: 100 * time.Millisecond,
		ReconnectMax: 2 * time.Second,
		Logger:       peerLog,
	}
	book := newLedger()

	// The subscriber starts on the first node and each publisher on a
	// node of its own, so that every node's loss hits someone.
	subOpts := opts
	subOpts.ClientID = "load-sub"
	sub := &link{name: "subscriber", urls: urls, first: 0, opts: subOpts, log: log,
		setup: func(ctx context.Context, c *peer.Conn) error {
			return c.Subscribe(ctx, cfg.topic, func(_ context.Context, d *peer.Delivery) (peer.Result, error) {
				var p loadPayload
				if err := d.Decode(&p); err != nil {
					return peer.Result{}, err
				}
				book.deliver(d.MessageID, p.Seq)
				return peer.Result{Processed: true}, nil
			}, nil)
		}}
	if err := sub.start(ctx); err != nil {
		return nil, err
	}
	defer sub.close()

	pubs := make([]*link, len(urls))
	for i := range pubs {
		pubOpts := opts
		pubOpts.ClientID = fmt.Sprintf("load-pub-%d", i+1)
		pubOpts.PublishOnly = true
		pubs[i] = &link{name: pubOpts.ClientID, urls: urls, first: i, opts: pubOpts, log: log}
		if err := pubs[i].start(ctx); err != nil {
			return nil, err
		}
		defer pubs[i].close()
	}

	var n counters
	started := time.Now()
	// Every load message is published by the end of the drain, or
	// counted as never accepted.
	pubCtx, cancel := drainBound(ctx, cfg, started, calm)
	defer cancel()
	seqs := make(chan int)
	go func() {
		defer close(seqs)
		pace := time.NewTicker(cfg.duration / time.Duration(cfg.messages))
		defer pace.Stop()
		for seq := 1; seq <= cfg.messages; seq++ {
			select {
			case seqs <- seq:
			case <-pubCtx.Done():
				return
			}
			select {
			case <-pace.C:
			case <-pubCtx.Done():
				return
			}
		}
	}()
	progress := time.NewTicker(5 * time.Second)
	defer progress.Stop()
	go func() {
		for range progress.C {
			log.Info("load", "elapsed", time.Since(started).Round(time.Second), "accepted", n.accepted.Load(), "delivered_ids", book.deliveredIDs(),
				"held", n.held.Load(), "retrying", n.retrying.Load(), "refused", n.refused.Load(), "unknown", n.unknown.Load())
		}
	}()
	var wg sync.WaitGroup
	for w := range cfg.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := range seqs {
				publish(pubCtx, pubs[w%len(pubs)], cfg.topic, seq, book, &n, log)
			}
		}()
	}
	wg.Wait()
	log.Info("load sent", "elapsed", time.Since(started).Round(time.Second), "accepted", n.accepted.Load(), "refused", n.refused.Load(), "unknown", n.unknown.Load())

	dead, err := drain(ctx, pubCtx.Done(), pubs, cfg.topic, book, log)
	if err != nil {
		return nil, err
	}
	// A moment for late redeliveries, so the duplicates are counted.
	time.Sleep(2 * time.Second)
	a := book.reckon(cfg.messages, dead)
	a.Publishes = publishTally{Held: n.held.Load(), Retrying: n.retrying.Load(), Refused: n.refused.Load(), Unanswered: n.unknown.Load()}
	a.Redials = sub.redials()
	for _, p := range pubs {
		a.Redials += p.redials()
	}
	return a, nil
}

// publish sends load message seq until the bus accepts it or ctx ends.
// An answer with a messageId is acceptance: delivered, retrying or held.
// An error from the bus, or no answer, is retried; with no answer the
// bus may have accepted it anyway, which the account counts.
func publish(ctx context.Context, pub *link, topic string, seq int, book *ledger, n *counters, log *slog.Logger) {
	payload := loadPayload{Type: "load", Seq: seq}
	for attempt := 1; ctx.Err() == nil; attempt++ {
		res, err := pub.get().SendMessage(ctx, topic, payload, nil)
		var rpcErr *protocol.Error
		switch {
		case err == nil && res.MessageID != "" && !res.NoSubscribers():
			book.accept(res.MessageID, seq, describe(res))
			n.accepted.Add(1)
			if res.Held {
				n.held.Add(1)
			}
			for _, ack := range res.Acks {
				if ack.Retrying {
					n.retrying.Add(1)
					break
				}
			}
			return
		case err == nil:
			n.refused.Add(1)
			log.Warn("publish not kept by the bus; again", "seq", seq, "reason", res.Reason)
		case errors.As(err, &rpcErr):
			n.refused.Add(1)
			log.Info("publish refused; again", "seq", seq, "attempt", attempt, "err", err)
		default:
			n.unknown.Add(1)
			log.Info("publish unanswered; again", "seq", seq, "attempt", attempt, "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// describe sums up a sendMessage answer: success, held, and each ack.
func describe(res *protocol.SendMessageResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "success=%v held=%v acks=[", res.Success, res.Held)
	for i, ack := range res.Acks {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s processed=%v", ack.ClientID, ack.Processed)
		if ack.Error != "" {
			fmt.Fprintf(&b, " error=%q", ack.Error)
		}
		if ack.Retrying {
			fmt.Fprintf(&b, " retrying attempt %d", ack.Attempt)
		}
	}
	b.WriteString("]")
	return b.String()
}

// drainBound returns a context that ends cfg.drain after the load's
// planned end and calm, whichever comes later.
func drainBound(ctx context.Context, cfg config, started time.Time, calm <-chan struct{}) (context.Context, context.CancelFunc) {
	bound, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-time.After(time.Until(started.Add(cfg.duration))):
		case <-bound.Done():
			return
		}
		select {
		case <-calm:
		case <-bound.Done():
			return
		}
		select {
		case <-time.After(cfg.drain):
			cancel()
		case <-bound.Done():
		}
	}()
	return bound, cancel
}

// drain waits until every accepted id was delivered or dead-lettered, or
// until ends, and returns the dead letters of the topic by messageId,
// with their reasons.
func drain(ctx context.Context, until <-chan struct{}, pubs []*link, topic string, book *ledger, log *slog.Logger) (map[string]string, error) {
	var dead map[string]string
	for round := 0; ; round++ {
		missing := book.missing()
		if len(missing) > 0 {
			var err error
			// Any node answers for the whole cluster's queue; ask each in turn.
			if dead, err = deadLetters(ctx, pubs[round%len(pubs)], topic); err != nil && round%5 == 0 {
				log.Info("dlq.list failed; again", "err", err)
			}
		}
		left := 0
		for _, id := range missing {
			if dead[id] == "" {
				left++
			}
		}
		if left == 0 {
			return dead, nil
		}
		if isDone(until) || ctx.Err() != nil {
			log.Warn("drain ended with ids unaccounted for", "ids", left)
			return dead, nil
		}
		if round%5 == 0 {
			log.Info("draining", "undelivered_ids", left)
		}
		time.Sleep(time.Second)
	}
}

// deadLetters lists the topic's dead letters, page by page.
func deadLetters(ctx context.Context, pub *link, topic string) (map[string]string, error) {
	dead := map[string]string{}
	cursor := ""
	for {
		var page protocol.DLQListResult
		params := protocol.DLQListParams{DLQFilter: protocol.DLQFilter{Topic: topic}, Cursor: cursor, Limit: 500}
		if err := pub.get().Call(ctx, protocol.MethodDLQList, params, &page); err != nil {
			return nil, fmt.Errorf("dlq.list: %w", err)
		}
		for _, d := range page.Entries {
			dead[d.MessageID] = d.Reason
		}
		if cursor = page.NextCursor; cursor == "" {
			return dead, nil
		}
	}
}

// isDone says whether ch is closed.
func isDone(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
