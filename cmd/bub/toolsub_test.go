package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/peer"
	"github.com/bub-bus/bub/protocol"
	"github.com/bub-bus/bub/spawner"
)

// timerToolBinary builds examples/timer-tool once for the tests that need
// it.
var timerToolBinary = exampleBinary("timer-tool")

// startTimerTool runs the timer tool against busURL with its state in
// state, and stops it when the test ends.
func startTimerTool(t *testing.T, busURL, state string) *lockedBuffer {
	t.Helper()
	bin, err := timerToolBinary()
	require.NoError(t, err)
	cmd := exec.Command(bin, "--bus-url", busURL, "--state", state)
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	require.Eventually(t, func() bool { return strings.Contains(stderr.String(), "timer-tool ready") }, 20*time.Second, 20*time.Millisecond, "the timer tool to serve")
	return stderr
}

// conversation watches one chat: the echo agent's replies on
// outbound:{chat}, counted by text, and the spawner's events.
type conversation struct {
	client *peer.Conn
	mu     sync.Mutex
	texts  []string
	counts map[string]int
	agents map[string]bool // the agent_id of each reply
	woken  map[string]int  // system:agent.woken by reason
	asleep int             // system:agent.hibernated
	// replied hears each reply's text.
	replied chan string
	// hibernated hears each hibernation.
	hibernated chan struct{}
}

// watch connects a peer that watches chat's replies and the spawner's
// events. It reconnects on its own when the bus restarts.
func watch(t *testing.T, ctx context.Context, busURL, chat string) *conversation {
	t.Helper()
	c := &conversation{counts: map[string]int{}, agents: map[string]bool{}, woken: map[string]int{}, replied: make(chan string, 100), hibernated: make(chan struct{}, 100)}
	var err error
	c.client, err = peer.Dial(ctx, busURL, &peer.Options{ClientID: "tester", Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { c.client.Close() })
	err = c.client.Subscribe(ctx, "outbound:"+chat, func(_ context.Context, d *peer.Delivery) (peer.Result, error) {
		var r echoReply
		if err := d.Decode(&r.Payload); err != nil {
			return peer.Result{}, err
		}
		c.mu.Lock()
		c.texts = append(c.texts, r.Payload.Text)
		c.counts[r.Payload.Text]++
		c.agents[r.Payload.AgentID] = true
		c.mu.Unlock()
		c.replied <- r.Payload.Text
		return peer.Result{Processed: true}, nil
	}, nil)
	require.NoError(t, err)
	err = c.client.Subscribe(ctx, "system:agent.*", func(_ context.Context, d *peer.Delivery) (peer.Result, error) {
		var ev spawner.Event
		if err := d.Decode(&ev); err != nil {
			return peer.Result{}, err
		}
		c.mu.Lock()
		switch ev.Event {
		case spawner.EventWoken:
			c.woken[ev.Reason]++
		case spawner.EventHibernated:
			c.asleep++
			c.hibernated <- struct{}{}
		}
		c.mu.Unlock()
		return peer.Result{}, nil
	}, &peer.SubscribeOptions{Policy: "continueAll"})
	require.NoError(t, err)
	return c
}

// await waits for a reply with text.
func (c *conversation) await(t *testing.T, ctx context.Context, text string) {
	t.Helper()
	c.awaitMatch(t, ctx, text, func(got string) bool { return got == text })
}

// awaitPrefix waits for a reply that starts with prefix.
func (c *conversation) awaitPrefix(t *testing.T, ctx context.Context, prefix string) {
	t.Helper()
	c.awaitMatch(t, ctx, prefix+"...", func(got string) bool { return strings.HasPrefix(got, prefix) })
}

func (c *conversation) awaitMatch(t *testing.T, ctx context.Context, text string, match func(string) bool) {
	t.Helper()
	for {
		select {
		case got := <-c.replied:
			if match(got) {
				return
			}
		case <-ctx.Done():
			c.mu.Lock()
			defer c.mu.Unlock()
			t.Fatalf("no reply %q; the replies: %q", text, c.texts)
		}
	}
}

// awaitHibernation waits for the next hibernation of an agent.
func (c *conversation) awaitHibernation(t *testing.T, ctx context.Context) {
	t.Helper()
	select {
	case <-c.hibernated:
	case <-ctx.Done():
		t.Fatal("the agent never hibernated")
	}
}

// checkOnce fails the test for a reply that came more than once.
func (c *conversation) checkOnce(t *testing.T) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for text, n := range c.counts {
		if n > 1 {
			t.Errorf("reply %q came %d times; the replies: %q", text, n, c.texts)
		}
	}
}

func tick(n int) string { return fmt.Sprintf(`event: {"tick":%d}`, n) }

// TestToolEventsWakeHibernatedAgent: with the real bus, spawner
// (--idle-timeout 1s), echo agent and timer tool, the agent subscribes to
// the tool and hibernates; each of the tool's events wakes it (reason
// "tool event") and is answered once, the final one included, and the
// subscription is gone after it.
func TestToolEventsWakeHibernatedAgent(t *testing.T) {
	agentBin, err := echoAgentBinary()
	require.NoError(t, err)
	d := startBus(t, t.TempDir(), "--retry-base-delay", "100ms")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	conv := watch(t, ctx, d.url, "t1")
	env := []string{"BUB_BUS_URL=" + d.url}
	root := filepath.Join(t.TempDir(), "workspaces")
	sp := startBub(t, env, "spawner", "--command", agentBin, "--workspace-root", root, "--idle-timeout", "1s", "--spawn-timeout", "20s")
	require.Eventually(t, func() bool { return strings.Contains(sp.stderr.String(), "spawner serving") }, 20*time.Second, 20*time.Millisecond, "the spawner to serve")
	startTimerTool(t, d.url, filepath.Join(t.TempDir(), "timers.json"))

	// A tick every 3 s: the agent, idle for 1 s, hibernates between two.
	_, err = conv.client.SendMessage(ctx, "tg:t1", map[string]any{"type": "telegram_message", "text": "/timer 3s 3", "chat_id": "t1"}, nil)
	require.NoError(t, err)
	conv.awaitPrefix(t, ctx, "subscribed: Subscribed: a tick every 3s. Subscription ID: timer-")
	for n := 1; n <= 2; n++ {
		conv.await(t, ctx, tick(n))
	}
	conv.await(t, ctx, `event (final): {"tick":3}`)
	// Each event went to the agent once: a duplicate would come within
	// the retry delay (100 ms); a second is many of those.
	select {
	case extra := <-conv.replied:
		t.Errorf("a reply after the final event: %q", extra)
	case <-time.After(2 * time.Second):
	}
	conv.checkOnce(t)
	conv.mu.Lock()
	woken, asleep, agents := conv.woken[spawner.ReasonToolEvent], conv.asleep, len(conv.agents)
	conv.mu.Unlock()
	t.Logf("3 ticks answered; %d hibernations, %d wakes by a tool event", asleep, woken)
	assert.GreaterOrEqual(t, woken, 1, "no wake with reason %q", spawner.ReasonToolEvent)
	assert.Equal(t, 1, agents, "the replies came from more than one agent id")
	out, errOut, code := bub(t, env, "", "tool-subscriptions", "list", "--client-id", "tester", "--json")
	assert.Equal(t, 0, code, errOut)
	assert.Contains(t, out, `"subscriptions":[]`)
}

// TestToolSubscriptionSurvivesKill: while the agent is hibernated, the
// bus and the spawner are killed (SIGKILL) and started again; the tool
// subscription survives, the next event wakes the agent, with the same
// agent id, and each tick is answered once, none skipped.
func TestToolSubscriptionSurvivesKill(t *testing.T) {
	agentBin, err := echoAgentBinary()
	require.NoError(t, err)
	busDir := t.TempDir()
	addr := freeAddr(t)
	d := startBusAt(t, addr, busDir, "--retry-base-delay", "100ms")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	conv := watch(t, ctx, d.url, "t2")
	env := []string{"BUB_BUS_URL=" + d.url}
	root := filepath.Join(t.TempDir(), "workspaces")
	spawnerArgs := []string{"spawner", "--command", agentBin, "--workspace-root", root, "--idle-timeout", "1s", "--spawn-timeout", "20s"}
	sp := startBub(t, env, spawnerArgs...)
	require.Eventually(t, func() bool { return strings.Contains(sp.stderr.String(), "spawner serving") }, 20*time.Second, 20*time.Millisecond, "the spawner to serve")
	startTimerTool(t, d.url, filepath.Join(t.TempDir(), "timers.json"))

	_, err = conv.client.SendMessage(ctx, "tg:t2", map[string]any{"type": "telegram_message", "text": "/timer 4s 0", "chat_id": "t2"}, nil)
	require.NoError(t, err)
	conv.await(t, ctx, tick(1))
	// The agent hibernated before tick 1 too: only a hibernation after
	// this reply says it sleeps now.
	for len(conv.hibernated) > 0 {
		<-conv.hibernated
	}
	conv.awaitHibernation(t, ctx)
	conv.mu.Lock()
	wokenBefore := conv.woken[spawner.ReasonToolEvent]
	conv.mu.Unlock()
	// The agent is hibernated, and tick 2 is a few seconds off.
	d.kill()
	require.NoError(t, sp.cmd.Process.Kill())
	_ = sp.cmd.Wait()
	d = startBusAt(t, addr, busDir, "--retry-base-delay", "100ms")
	sp = startBub(t, env, spawnerArgs...)
	require.Eventually(t, func() bool { return strings.Contains(sp.stderr.String(), "spawner serving") }, 20*time.Second, 20*time.Millisecond, "the spawner to serve again")

	for n := 2; n <= 3; n++ {
		conv.await(t, ctx, tick(n))
	}
	conv.checkOnce(t)
	conv.mu.Lock()
	woken, texts, agents := conv.woken[spawner.ReasonToolEvent]-wokenBefore, conv.texts, len(conv.agents)
	var agentID string
	for id := range conv.agents {
		agentID = id
	}
	conv.mu.Unlock()
	t.Logf("replies %q; %d wakes by a tool event after the restart", texts, woken)
	assert.GreaterOrEqual(t, woken, 1, "no wake with reason %q after the restart", spawner.ReasonToolEvent)
	assert.Equal(t, 1, agents, "the agent came back with another id")
	out, errOut, code := bub(t, env, "", "tool-subscriptions", "list", "--client-id", agentID)
	assert.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "tg:t2", "the agent's subscription, as the bus keeps it")
	for i, text := range texts[1:] {
		if want := tick(i + 1); text != want {
			t.Errorf("reply %d is %q, want %q: a tick was skipped or came twice", i+1, text, want)
		}
	}
	out, errOut, code = bub(t, env, "", "tool-subscriptions", "list", "--client-id", "tester")
	assert.Equal(t, 0, code, errOut)
	assert.NotContains(t, out, "timer-", "the tester started no subscription; it sees none")
}

// TestToolSubscriptionsCommand: bub tool-subscriptions start, list and
// cancel against a real bus, with the callback URL it prints.
func TestToolSubscriptionsCommand(t *testing.T) {
	t.Parallel()
	d := startBus(t, t.TempDir())
	env := []string{"BUB_BUS_URL=" + d.url, "BUB_AGENT_ID="}
	_, errOut, code := bub(t, env, "", "tool-subscriptions", "start", "--client-id", "a1")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "--group-id and --tool-call-id are required")
	_, errOut, code = bub(t, env, "", "tool-subscriptions", "list")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "give --client-id")

	out, errOut, code := bub(t, env, "", "tool-subscriptions", "start", "--client-id", "a1", "--group-id", "g", "--tool-call-id", "c", "--topic", "tg:x", "--json")
	require.Equal(t, 0, code, errOut)
	var started struct {
		CallbackURL string `json:"callback_url"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &started), out)
	require.True(t, strings.HasPrefix(started.CallbackURL, d.http+"/v1/callbacks/"), started.CallbackURL)
	post := func() error {
		return peer.PostSubscriptionEvent(context.Background(), nil, started.CallbackURL, protocol.SubscriptionEvent{GroupID: "g", ToolCallID: "c", Text: "x"})
	}
	require.NoError(t, post(), "nobody subscribes tg:x: taken, and orphaned")

	out, errOut, code = bub(t, env, "", "tool-subscriptions", "list", "--client-id", "a1")
	require.Equal(t, 0, code, errOut)
	assert.Regexp(t, `(?m)^g +c +tg:x +a1 `, out)
	_, errOut, code = bub(t, env, "", "tool-subscriptions", "cancel", "--client-id", "a2", "--group-id", "g", "--tool-call-id", "c")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "forbidden")
	out, errOut, code = bub(t, env, "", "tool-subscriptions", "cancel", "--client-id", "a1", "--group-id", "g", "--tool-call-id", "c")
	require.Equal(t, 0, code, errOut)
	assert.Equal(t, "cancelled; no tool topic to notify\n", out)
	assert.ErrorIs(t, post(), peer.ErrSubscriptionGone)
	_, errOut, code = bub(t, env, "", "tool-subscriptions", "cancel", "--client-id", "a1", "--group-id", "g", "--tool-call-id", "c")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, `thread "g" has no active subscription of tool call "c"`)
}
