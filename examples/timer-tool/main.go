// Command timer-tool is a subscription tool (docs/PROTOCOL.md, "Tool
// subscriptions"): an agent calls it with a tool_call on its topic
// (tool:timer), and it posts a subscription_event to the call's callback
// every interval, {"tick":N}, the last one (with "count") final. It keeps
// going while the agent is hibernated: each event wakes the agent.
//
// Arguments of the call: {"every":"2s","count":5}; count 0 ticks until
// the subscription is cancelled. The tool stores its subscriptions in
// --state, so that a restart of the tool goes on from the next tick, and
// stops one when the bus answers that it is gone (cancelled, or final)
// or when a cancel_tool_call comes on its topic. An event the bus cannot
// take now (the bus down, 429, 503) is posted again until it is taken, so
// that no tick is skipped.
//
//	timer-tool --bus-url ws://127.0.0.1:7892/ --state timer.json
//
// Flags are also read from BUB_BUS_URL, BUB_TIMER_TOPIC and
// BUB_TIMER_STATE.
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
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/bub-bus/bub/peer"
	"github.com/bub-bus/bub/protocol"
)

// minEvery bounds the interval, well above a bus's default event rate.
const minEvery = 100 * time.Millisecond

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	fs := flag.NewFlagSet("timer-tool", flag.ExitOnError)
	busURL := fs.String("bus-url", envOr("BUB_BUS_URL", peer.DefaultBusURL), "the bus (BUB_BUS_URL)")
	topic := fs.String("topic", envOr("BUB_TIMER_TOPIC", "tool:timer"), "the topic the tool takes calls on (BUB_TIMER_TOPIC)")
	state := fs.String("state", envOr("BUB_TIMER_STATE", "timer-tool.json"), "file the subscriptions are kept in (BUB_TIMER_STATE)")
	_ = fs.Parse(os.Args[1:])
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, log, *busURL, *topic, *state); err != nil {
		fmt.Fprintf(os.Stderr, "timer-tool: %v\n", err)
		os.Exit(1)
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// timer is one subscription: the call's callback and where it is.
type timer struct {
	GroupID     string        `json:"group_id"`
	ToolCallID  string        `json:"tool_call_id"`
	CallbackURL string        `json:"callback_url"`
	Every       time.Duration `json:"every"`
	Count       int           `json:"count"`
	// Next is the tick to post next, from 1.
	Next int `json:"next"`
}

// tool serves calls and runs the timers.
type tool struct {
	log   *slog.Logger
	state string

	mu     sync.Mutex
	timers map[string]*timer             // by tool_call_id
	stops  map[string]context.CancelFunc // by tool_call_id
	ctx    context.Context
	wg     sync.WaitGroup
}

func run(ctx context.Context, log *slog.Logger, busURL, topic, state string) error {
	t := &tool{log: log, state: state, timers: map[string]*timer{}, stops: map[string]context.CancelFunc{}, ctx: ctx}
	if err := t.load(); err != nil {
		return err
	}
	conn, err := peer.Dial(ctx, busURL, &peer.Options{ClientID: "timer-tool", Logger: log})
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.Subscribe(ctx, topic, t.handle, nil); err != nil {
		return err
	}
	t.mu.Lock()
	for _, tm := range t.timers {
		t.startLocked(tm)
	}
	resumed := len(t.timers)
	t.mu.Unlock()
	log.Info("timer-tool ready", "topic", topic, "resumed", resumed)
	select {
	case <-ctx.Done():
	case <-conn.Done():
		err = conn.Err()
	}
	t.wg.Wait()
	return err
}

// arguments are a call's arguments.
type arguments struct {
	Every string `json:"every"`
	Count int    `json:"count"`
}

func (t *tool) handle(_ context.Context, d *peer.Delivery) (peer.Result, error) {
	if d.Type() == protocol.TypeCancelToolCall {
		var c protocol.CancelToolCall
		if err := d.Decode(&c); err != nil {
			return peer.Result{}, err
		}
		t.end(c.ToolCallID, "cancelled")
		return peer.Result{Processed: true}, nil
	}
	call, ok := d.ToolCall()
	if !ok {
		return peer.Result{Message: fmt.Sprintf("timer-tool takes tool_call and cancel_tool_call, not %q", d.Type())}, nil
	}
	fail := func(format string, args ...any) (peer.Result, error) {
		return peer.ToolResultOf(protocol.ToolResult{ID: call.ID, Text: fmt.Sprintf(format, args...), IsError: true}), nil
	}
	var args arguments
	if len(call.Arguments) > 0 {
		if err := json.Unmarshal(call.Arguments, &args); err != nil {
			return fail("arguments: %v", err)
		}
	}
	every, err := time.ParseDuration(args.Every)
	switch {
	case err != nil:
		return fail("every: %v (write it as 2s or 1m)", err)
	case every < minEvery:
		return fail("every: at least %s", minEvery)
	case args.Count < 0:
		return fail("count: 0 (no end) or more")
	case call.CallbackURL == "":
		return fail("the call carries no callback_url")
	}
	tm := &timer{GroupID: call.GroupID, ToolCallID: call.ID, CallbackURL: call.CallbackURL, Every: every, Count: args.Count, Next: 1}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.timers[call.ID] != nil {
		return fail("tool call %s already has a timer", call.ID)
	}
	t.timers[call.ID] = tm
	// Stored before the result says subscribed: the tool must keep the
	// callback durably.
	if err := t.saveLocked(); err != nil {
		delete(t.timers, call.ID)
		return fail("store the subscription: %v", err)
	}
	t.startLocked(tm)
	t.log.Info("timer started", "group_id", tm.GroupID, "tool_call_id", tm.ToolCallID, "every", every, "count", tm.Count)
	return peer.ToolResultOf(protocol.ToolResult{ID: call.ID, Subscription: true,
		Text: fmt.Sprintf("Subscribed: a tick every %s. Subscription ID: %s", every, call.ID)}), nil
}

// startLocked runs tm's ticks. The caller holds t.mu.
func (t *tool) startLocked(tm *timer) {
	ctx, cancel := context.WithCancel(t.ctx)
	t.stops[tm.ToolCallID] = cancel
	t.wg.Go(func() { t.tick(ctx, *tm) })
}

// tick posts tm's events, one per interval, each until the bus takes it.
func (t *tool) tick(ctx context.Context, tm timer) {
	for n := tm.Next; tm.Count == 0 || n <= tm.Count; n++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(tm.Every):
		}
		ev := protocol.SubscriptionEvent{GroupID: tm.GroupID, ToolCallID: tm.ToolCallID, Text: fmt.Sprintf(`{"tick":%d}`, n), Final: n == tm.Count}
		if err := t.post(ctx, tm.CallbackURL, ev); err != nil {
			if errors.Is(err, peer.ErrSubscriptionGone) {
				t.end(tm.ToolCallID, "gone")
			}
			return
		}
		t.advance(tm.ToolCallID, n+1)
	}
	t.end(tm.ToolCallID, "final event sent")
}

// post posts ev until the bus takes it, or answers that the
// subscription is gone, or ctx ends. A 400 is the tool's own bug, and
// the tick is skipped.
func (t *tool) post(ctx context.Context, url string, ev protocol.SubscriptionEvent) error {
	wait := 200 * time.Millisecond
	for {
		err := peer.PostSubscriptionEvent(ctx, nil, url, ev)
		var cerr *peer.CallbackError
		switch {
		case err == nil, errors.Is(err, peer.ErrSubscriptionGone):
			return err
		case errors.As(err, &cerr) && cerr.Status == 400:
			t.log.Error("event refused", "tool_call_id", ev.ToolCallID, "err", err)
			return nil
		case errors.As(err, &cerr) && cerr.RetryAfter > 0:
			wait = cerr.RetryAfter
		}
		t.log.Warn("event not taken; posting it again", "tool_call_id", ev.ToolCallID, "in", wait, "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// advance records that tick next is the one to post next.
func (t *tool) advance(toolCallID string, next int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if tm := t.timers[toolCallID]; tm != nil {
		tm.Next = next
		if err := t.saveLocked(); err != nil {
			t.log.Error("store the timers", "err", err)
		}
	}
}

// end stops a timer and forgets it.
func (t *tool) end(toolCallID, why string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.timers[toolCallID] == nil {
		return
	}
	t.stops[toolCallID]()
	delete(t.stops, toolCallID)
	delete(t.timers, toolCallID)
	if err := t.saveLocked(); err != nil {
		t.log.Error("store the timers", "err", err)
	}
	t.log.Info("timer ended", "tool_call_id", toolCallID, "why", why)
}

// load reads the stored timers; a missing file is none.
func (t *tool) load() error {
	b, err := os.ReadFile(t.state)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read state: %w", err)
	}
	var list []*timer
	if err := json.Unmarshal(b, &list); err != nil {
		return fmt.Errorf("read state %s: %w", t.state, err)
	}
	for _, tm := range list {
		t.timers[tm.ToolCallID] = tm
	}
	return nil
}

// saveLocked writes the timers, durably: to a new file, synced, renamed
// over the old. The caller holds t.mu.
func (t *tool) saveLocked() error {
	list := make([]*timer, 0, len(t.timers))
	for _, tm := range t.timers {
		list = append(list, tm)
	}
	b, err := json.Marshal(list)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(t.state), ".timer-tool-*")
	if err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	_, err = tmp.Write(b)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), t.state)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write state %s: %w", t.state, err)
	}
	return nil
}
