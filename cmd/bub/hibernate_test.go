package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/internal/proctree"
	"github.com/bub-bus/bub/peer"
	"github.com/bub-bus/bub/spawner"
)

// TestSpawnerServesManyConversationsWithFewAgents: 200 conversations
// through bub spawner --max-agents 4 --idle-timeout 1s, with the real bus,
// spawner and echo agent: every first message is answered, nothing is
// dead-lettered, and never more than 4 agent processes run, as counted
// from /proc and from the spawner's own events.
func TestSpawnerServesManyConversationsWithFewAgents(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("counts the spawner's children in /proc")
	}
	n := 200
	if testing.Short() {
		n = 40
	}
	const maxAgents = 4
	agentBin, err := echoAgentBinary()
	if err != nil {
		t.Fatal(err)
	}
	d := startBus(t, t.TempDir(), "--retry-base-delay", "100ms")
	env := []string{"BUB_BUS_URL=" + d.url}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()

	client, err := peer.Dial(ctx, d.url, &peer.Options{ClientID: "tester", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	answered := make(chan string, n)
	var seen sync.Map
	err = client.Subscribe(ctx, "outbound:*", func(_ context.Context, d *peer.Delivery) (peer.Result, error) {
		var r struct {
			Text string `json:"text"`
		}
		if err := d.Decode(&r); err != nil {
			return peer.Result{}, err
		}
		if _, again := seen.LoadOrStore(d.Topic, true); !again {
			answered <- d.Topic
		}
		return peer.Result{Processed: true}, nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The spawner's events, in the order it published them: spawned and
	// exited bound the processes it had at any moment.
	var running, maxByEvents, hibernated, woken atomic.Int64
	err = client.Subscribe(ctx, "system:agent.*", func(_ context.Context, d *peer.Delivery) (peer.Result, error) {
		var ev spawner.Event
		if err := d.Decode(&ev); err != nil {
			return peer.Result{}, err
		}
		switch ev.Event {
		case spawner.EventSpawned:
			if now := running.Add(1); now > maxByEvents.Load() {
				maxByEvents.Store(now)
			}
		case spawner.EventExited:
			running.Add(-1)
		case spawner.EventHibernated:
			hibernated.Add(1)
		case spawner.EventWoken:
			woken.Add(1)
		}
		return peer.Result{}, nil
	}, &peer.SubscribeOptions{Policy: "continueAll"})
	if err != nil {
		t.Fatal(err)
	}

	root := filepath.Join(t.TempDir(), "workspaces")
	metrics := freeAddr(t)
	sp := startBub(t, env, "spawner", "--command", agentBin, "--workspace-root", root, "--metrics-listen", metrics,
		"--max-agents", strconv.Itoa(maxAgents), "--idle-timeout", "1s", "--spawn-timeout", "10s")
	require.Eventually(t, func() bool { return strings.Contains(sp.stderr.String(), "spawner serving") }, 20*time.Second, 20*time.Millisecond, "the spawner to serve")

	var maxChildren atomic.Int64
	watching := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			if c := int64(proctree.Children(sp.cmd.Process.Pid)); c > maxChildren.Load() {
				maxChildren.Store(c)
			}
			select {
			case <-watching:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()

	start := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			payload := map[string]any{"type": "telegram_message", "text": fmt.Sprintf("hello %d", i), "chat_id": fmt.Sprintf("c%d", i)}
			if _, err := client.SendMessage(ctx, fmt.Sprintf("tg:c%d", i), payload, nil); err != nil {
				t.Errorf("send to tg:c%d: %v", i, err)
			}
		})
	}
	for got := 0; got < n; got++ {
		select {
		case <-answered:
		case <-ctx.Done():
			close(watching)
			t.Fatalf("%d of %d conversations answered after %s; spawner log:\n%s", got, n, time.Since(start), sp.stderr)
		}
	}
	elapsed := time.Since(start)
	wg.Wait()
	close(watching)
	<-watched
	t.Logf("%d conversations answered in %s by at most %d agent processes (/proc: %d); %d hibernations, %d wakes",
		n, elapsed.Round(time.Millisecond), maxByEvents.Load(), maxChildren.Load(), hibernated.Load(), woken.Load())
	if m := maxChildren.Load(); m > maxAgents {
		t.Errorf("%d agent processes at once in /proc, want at most %d", m, maxAgents)
	}
	if m := maxByEvents.Load(); m > maxAgents {
		t.Errorf("%d agent processes at once by the spawner's events, want at most %d", m, maxAgents)
	}
	// Every agent that took no new message for 1s is hibernated.
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + metrics + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(body), "bub_spawner_agents_running 0") &&
			strings.Contains(string(body), fmt.Sprintf("bub_spawner_agents_hibernated %d", n))
	}, 20*time.Second, 20*time.Millisecond, "every agent to hibernate")
	out, errOut, code := bub(t, env, "", "dlq", "list")
	if code != 0 || strings.Contains(out, "tg:") {
		t.Errorf("dlq list: exit %d, %s%s; want no dead letters", code, out, errOut)
	}
}
