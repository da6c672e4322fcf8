package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/coder/websocket"
)

// The spawn scenario times a new conversation: the first message to a chat
// nobody serves yet, from the publish until the agent that `bub spawner`
// starts for it receives the message. It runs bub serve, bub spawner with
// tg:* as its fallback, and bench/agent as the agent command.

// spawnReportTopic is where bench/agent reports its first delivery.
const spawnReportTopic = "bench:spawned"

// spawnReport is bench/agent's report: the topic of its first delivery
// and when it arrived, in Unix nanoseconds.
type spawnReport struct {
	Topic string `json:"topic"`
	At    int64  `json:"at"`
}

func (h *harness) spawn() error {
	agent, err := h.buildAgent()
	if err != nil {
		return err
	}
	var runs []stats
	for range h.cfg.rounds {
		err := h.withFreshBus(func(bus *process) error {
			s, err := h.spawnRun(bus, agent)
			runs = append(runs, s)
			return err
		})
		if err != nil {
			return fmt.Errorf("spawn to first delivery: %w", err)
		}
	}
	c := newCell(fmt.Sprintf("spawn to first delivery (%d)", h.cfg.spawns), map[string][]stats{"bus": runs}, lowerIsBetter)
	c.Subscribers, c.InFlight = 1, 1
	h.res.Spawn = append(h.res.Spawn, c)
	log.Print(c.busSummary())
	return nil
}

// buildAgent builds bench/agent into the temp dir.
func (h *harness) buildAgent() (string, error) {
	bin := filepath.Join(h.tmp, "bench-agent")
	cmd := exec.Command("go", "build", "-o", bin, "./agent")
	cmd.Dir = filepath.Join(h.cfg.root, "bench")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build bench/agent in %s: %w", cmd.Dir, err)
	}
	return bin, nil
}

// spawnRun starts a spawner for bus, spawns one unmeasured agent (which
// also waits until the spawner has subscribed, and warms the page cache),
// then h.cfg.spawns measured ones, one after another.
func (h *harness) spawnRun(bus *process, agent string) (stats, error) {
	sp, err := startSpawner(h.bub, bus.addr, agent, h.tmp)
	if err != nil {
		return stats{}, err
	}
	defer sp.stop()
	sys := &busSystem{proc: bus}
	run := topicSeq.Add(1)
	sub, reports, err := listenSpawned(sys, run)
	if err != nil {
		return stats{}, err
	}
	defer sub.CloseNow()
	pub, err := sys.dial(fmt.Sprintf("bench-spawn-p%d", run))
	if err != nil {
		return stats{}, err
	}
	defer pub.CloseNow()
	if _, err := spawnOne(pub, reports, fmt.Sprintf("tg:bench%d-warm", run), true); err != nil {
		return stats{}, fmt.Errorf("first spawn: %w", err)
	}
	t := newTracker()
	bus0, _ := bus.cpuTime()
	sp0, _ := sp.cpuTime()
	start := time.Now()
	for i := range h.cfg.spawns {
		d, err := spawnOne(pub, reports, fmt.Sprintf("tg:bench%d-%d", run, i), false)
		if err != nil {
			return stats{}, err
		}
		t.record(d.Microseconds(), false)
	}
	s := t.stats(time.Since(start), 1)
	bus1, _ := bus.cpuTime()
	sp1, _ := sp.cpuTime()
	s.ServerCPUPerMsg = float64((bus1 - bus0).Microseconds()) / float64(h.cfg.spawns)
	s.HelperCPUPerMsg = float64((sp1 - sp0).Microseconds()) / float64(h.cfg.spawns)
	return s, nil
}

// startSpawner runs `bub spawner` against the bus at busAddr, serving tg:*
// with agent as its command. Agents inherit BENCH_REPORT_TOPIC from it.
func startSpawner(bin, busAddr, agent, tmp string) (*process, error) {
	return startSpawnerWith(bin, busAddr, agent, tmp, []string{"BENCH_REPORT_TOPIC=" + spawnReportTopic})
}

// startSpawnerWith runs `bub spawner` against the bus at busAddr, serving
// tg:* with agent as its command and its workspaces in a fresh directory
// under tmp, with env added to the harness's environment (the agents
// inherit it) and flags added to the harness's own.
func startSpawnerWith(bin, busAddr, agent, tmp string, env []string, flags ...string) (*process, error) {
	if strings.ContainsAny(agent, `'\`) {
		return nil, fmt.Errorf("start bub spawner: the agent's path %q holds a quote or backslash", agent)
	}
	root, err := os.MkdirTemp(tmp, "workspaces-")
	if err != nil {
		return nil, fmt.Errorf("start bub spawner: %w", err)
	}
	args := append([]string{"spawner",
		"--bus-url", "ws://" + busAddr + "/",
		"--client-id", "bench-spawner",
		"--command", "'" + agent + "'",
		"--patterns", "tg:*",
		"--workspace-root", root,
		"--stop-timeout", "2s",
		"--log-level", "warn"}, flags...)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	return startProcess("bub spawner", cmd)
}

// listenSpawned subscribes spawnReportTopic and returns the agents'
// reports as they come.
func listenSpawned(b *busSystem, run uint64) (*leanConn, <-chan spawnReport, error) {
	ws, err := b.dial(fmt.Sprintf("bench-spawn-s%d", run))
	if err != nil {
		return nil, nil, err
	}
	if err := b.subscribe(ws, spawnReportTopic); err != nil {
		ws.CloseNow()
		return nil, nil, fmt.Errorf("subscribe %s: %w", spawnReportTopic, err)
	}
	reports := make(chan spawnReport, 16)
	go func() {
		defer close(reports)
		ctx := context.Background()
		for {
			_, msg, err := ws.Read(ctx)
			if err != nil {
				return
			}
			var call struct {
				ID     json.RawMessage `json:"id"`
				Params struct {
					Payload spawnReport `json:"payload"`
				} `json:"params"`
			}
			if json.Unmarshal(msg, &call) != nil || call.ID == nil {
				continue
			}
			answer := `{"jsonrpc":"2.0","id":` + string(call.ID) + `,"result":{"processed":true}}`
			if ws.Write(ctx, websocket.MessageText, []byte(answer)) != nil {
				return
			}
			reports <- call.Params.Payload
		}
	}()
	return ws, reports, nil
}

// spawnOne publishes the first message to topic and returns the time
// until its agent reported the delivery. With waitSpawner it publishes
// again while nobody serves the topic yet (the spawner is still
// connecting).
func spawnOne(pub *leanConn, reports <-chan spawnReport, topic string, waitSpawner bool) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), durableLimit)
	defer cancel()
	req := `{"jsonrpc":"2.0","method":"sendMessage","params":{"topic":"` + topic + `","payload":{"type":"plaintext_message","text":"hello"}},"id":1}`
	var start time.Time
	for {
		start = time.Now()
		resp, err := busRequest(ctx, pub, req)
		if err != nil {
			return 0, fmt.Errorf("publish to %s: %w", topic, err)
		}
		if !strings.Contains(string(resp), `"no_subscribers"`) {
			break
		}
		if !waitSpawner {
			return 0, fmt.Errorf("publish to %s: nobody serves it: %.300s", topic, resp)
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("publish to %s: the spawner did not subscribe tg:* within %s", topic, durableLimit)
		case <-time.After(20 * time.Millisecond):
		}
	}
	select {
	case r, ok := <-reports:
		if !ok {
			return 0, fmt.Errorf("%s: the report subscriber's connection ended", topic)
		}
		if r.Topic != topic {
			return 0, fmt.Errorf("%s: an agent reported a first delivery on %q", topic, r.Topic)
		}
		return time.Duration(r.At - start.UnixNano()), nil
	case <-ctx.Done():
		return 0, fmt.Errorf("%s: no agent reported its first delivery within %s", topic, durableLimit)
	}
}
