package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// The durable scenarios measure what the bus writes to its store: each
// runs on a bus started for it alone, so that the records one run leaves
// behind neither slow nor wake anything in the next.

// durablePayload is the payload size of the durable scenarios.
const durablePayload = 1 << 10

// retryInFlight are the messages in flight of the stored-retries runs:
// one, where each publish waits for its own commit, and many, where
// commits could be shared.
var retryInFlight = []int{1, 64}

// retryAnswer asks for a retry far beyond any run (the bus caps it at
// --retry-delay-cap, 5 minutes by default), so every publish stores one
// and none comes back while the run lasts.
const retryAnswer = `{"processed":false,"should_retry":true,"retry_seconds":3600}`

// retryExpect is what the publisher's result says once the retry is stored.
const retryExpect = `"retrying":true`

// heldInFlight is how many held publishes are in flight at once.
const heldInFlight = 64

// durableLimit bounds a counted run and the wait for held messages.
const durableLimit = time.Minute

// withFreshBus starts a bus for one run, runs measure on it, and stops it.
func (h *harness) withFreshBus(measure func(bus *process) error) error {
	bus, err := startBub(h.bub, h.tmp)
	if err != nil {
		return err
	}
	defer bus.stop()
	return measure(bus)
}

// retries measures stored retries per second: one subscriber that answers
// every delivery should_retry, so the bus commits a retry to its store
// before it answers each publish.
func (h *harness) retries() error {
	for _, window := range retryInFlight {
		var runs []stats
		for range h.cfg.rounds {
			err := h.withFreshBus(func(bus *process) error {
				sys := &busSystem{proc: bus, answer: retryAnswer, expect: retryExpect}
				ss, err := openSession(sys, 1, durablePayload)
				if err != nil {
					return err
				}
				defer ss.close()
				s, err := closedLoop(ss, window, h.cfg.warmup, h.cfg.runFor)
				runs = append(runs, s)
				if err != nil {
					return err
				}
				return logRecordsPerCommit(bus)
			})
			if err != nil {
				return fmt.Errorf("stored retries, %d in flight: %w", window, err)
			}
		}
		c := newCell(fmt.Sprintf("stored retries ×%d", window), map[string][]stats{"bus": runs}, higherIsBetter)
		c.Payload, c.InFlight, c.Subscribers = durablePayload, window, 1
		h.res.Durable = append(h.res.Durable, c)
		log.Print(c.busSummary())
	}
	return nil
}

// held measures holds: n messages published to agent:X while nobody
// subscribes, so the bus stores each before it answers (holds stored per
// second), then one subscription to agent:X and the time until all n are
// delivered to it (holds woken per second, from the subscribe request).
func (h *harness) held() error {
	n := int64(h.cfg.held)
	var stored, woken []stats
	for range h.cfg.rounds {
		err := h.withFreshBus(func(bus *process) error {
			topic := fmt.Sprintf("agent:bench-held-%d", topicSeq.Add(1))
			sys := &busSystem{proc: bus, expect: `"held":true`, topic: topic}
			ss, err := openSession(sys, 0, durablePayload)
			if err != nil {
				return err
			}
			defer ss.close()
			s, err := countedLoop(ss, heldInFlight, n, durableLimit)
			if err != nil {
				return fmt.Errorf("hold %d messages: %w", n, err)
			}
			stored = append(stored, s)
			w, err := wakeHeld(sys, topic, n)
			if err != nil {
				return fmt.Errorf("wake %d held messages: %w", n, err)
			}
			woken = append(woken, w)
			return nil
		})
		if err != nil {
			return err
		}
	}
	cs := newCell(fmt.Sprintf("held stored (%d)", n), map[string][]stats{"bus": stored}, higherIsBetter)
	cs.Payload, cs.InFlight = durablePayload, heldInFlight
	cw := newCell(fmt.Sprintf("held woken (%d)", n), map[string][]stats{"bus": woken}, higherIsBetter)
	cw.Payload, cw.Subscribers = durablePayload, 1
	h.res.Durable = append(h.res.Durable, cs, cw)
	log.Print(cs.busSummary())
	log.Print(cw.busSummary())
	return nil
}

// wakeHeld subscribes topic, where n messages are held, and times every
// delivery from the subscribe request: the throughput is n over the time
// to the last one. The bus's CPU is counted until its store is empty
// again, since deleting a delivered hold is part of waking it.
func wakeHeld(b *busSystem, topic string, n int64) (stats, error) {
	ws, err := b.dial(fmt.Sprintf("bench-held-%d", topicSeq.Add(1)))
	if err != nil {
		return stats{}, err
	}
	defer ws.CloseNow()
	t := newTracker()
	cpu0, _ := b.proc.cpuTime()
	start := time.Now()
	for i := range n {
		t.started(uint64(i), start.UnixNano())
	}
	atomic.StoreInt64(&t.measureAt, start.UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), durableLimit)
	defer cancel()
	if err := ws.Write(ctx, websocket.MessageText, []byte(`{"jsonrpc":"2.0","method":"subscribe","params":{"topic":"`+topic+`"},"id":"sub"}`)); err != nil {
		return stats{}, err
	}
	var got int64
	var last time.Time
	var out []byte
	for got < n {
		_, msg, err := ws.Read(ctx)
		if err != nil {
			return stats{}, fmt.Errorf("%d of %d delivered: %w", got, n, err)
		}
		if !bytes.Contains(msg, []byte(`"method":"processMessage"`)) {
			if bytes.Contains(msg, []byte(`"error":`)) {
				return stats{}, fmt.Errorf("subscribe %s: bus answered %.200s", topic, msg)
			}
			continue // the subscribe result
		}
		id, ok := topLevelID(msg)
		if !ok {
			return stats{}, fmt.Errorf("processMessage without an id: %.200s", msg)
		}
		t.done(uint64(got), false)
		got++
		last = time.Now()
		out = append(out[:0], `{"jsonrpc":"2.0","id":`...)
		out = append(out, id...)
		out = append(out, `,"result":{"processed":true}}`...)
		if err := ws.Write(ctx, websocket.MessageText, out); err != nil {
			return stats{}, err
		}
	}
	if err := waitStoreEmpty(ctx, b.proc); err != nil {
		return stats{}, err
	}
	cpu1, _ := b.proc.cpuTime()
	s := t.stats(last.Sub(start), 1)
	s.ServerCPU = (cpu1 - cpu0).Seconds() / time.Since(start).Seconds()
	s.ServerCPUPerMsg = float64((cpu1 - cpu0).Microseconds()) / float64(n)
	return s, nil
}

// waitStoreEmpty polls the bus's bub_pending gauge until no retry or hold
// is left in its store.
func waitStoreEmpty(ctx context.Context, bus *process) error {
	for {
		v, err := busMetrics(bus, "bub_pending")
		if err != nil {
			return err
		}
		pending := v[0]
		if pending == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("bub_pending still %v: %w", pending, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// busMetrics reads the unlabelled metrics names from the bus's /metrics.
func busMetrics(bus *process, names ...string) ([]float64, error) {
	body, err := fetch("http://" + bus.addr + "/metrics")
	if err != nil {
		return nil, err
	}
	values := make([]float64, len(names))
	for i, name := range names {
		if values[i], err = gauge(body, name); err != nil {
			return nil, err
		}
	}
	return values, nil
}

// gauge reads an unlabelled metric from a Prometheus text exposition.
func gauge(body []byte, name string) (float64, error) {
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		if rest, ok := bytes.CutPrefix(sc.Bytes(), []byte(name+" ")); ok {
			v, err := strconv.ParseFloat(string(bytes.TrimSpace(rest)), 64)
			if err != nil {
				return 0, fmt.Errorf("metric %s: %w", name, err)
			}
			return v, nil
		}
	}
	return 0, fmt.Errorf("no metric %s in /metrics", name)
}

// logRecordsPerCommit logs how many stored retries the bus's store
// committed per transaction (and so per fsync) since it started.
func logRecordsPerCommit(bus *process) error {
	v, err := busMetrics(bus, "bub_store_commit_seconds_count", "bub_retries_scheduled_total")
	if err != nil {
		return err
	}
	commits, retries := v[0], v[1]
	log.Printf("%.0f retries stored in %.0f commits: %.1f per commit", retries, commits, retries/max(commits, 1))
	return nil
}
