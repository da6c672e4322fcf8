package spawner_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/protocol"
	"github.com/bub-bus/bub/spawner"
)

// slowChat is a chat message the echo agent takes delay to answer.
func slowChat(text string, delay time.Duration) map[string]any {
	return map[string]any{"type": "telegram_message", "text": text, "delay_ms": delay.Milliseconds()}
}

// TestCapacityHibernatesLeastRecentlyUsed: at --max-agents, a new
// conversation is served at once: the agent used least recently is
// hibernated to make room, and the next message for its conversation
// wakes it with the same id in the same workspace.
func TestCapacityHibernatesLeastRecentlyUsed(t *testing.T) {
	t.Parallel()
	h := newHarness(t, spawner.Options{MaxAgents: 2}, nil)
	h.send(t, "tg:1", chat("one"))
	first := h.reply(t)
	h.send(t, "tg:2", chat("two"))
	second := h.reply(t)
	// The reply comes before tg:2's agent answers the delivery, and
	// until the bus's idle event for that answer reaches the spawner
	// tg:2 is still in use. Sent meanwhile, tg:1's next message may be
	// answered first (on a loaded machine the agents' turns interleave
	// any way), and then it is tg:1 that was used least recently: the
	// spawner orders agents by when their last delivery ended.
	awaitAnswered(t, h, second.AgentID)
	h.send(t, "tg:1", chat("one again")) // tg:2 is now the least recently used
	h.replyWithText(t, "echo: one again")
	// The spawner learns of it from the bus's idle event, after the
	// reply.
	require.Eventually(t, func() bool {
		last := map[string]time.Time{}
		for _, a := range h.sp.Agents() {
			if !a.Busy {
				last[a.Topic] = a.LastActive
			}
		}
		return last["tg:1"].After(last["tg:2"]) && !last["tg:2"].IsZero()
	}, wait, 10*time.Millisecond, "the spawner to see tg:1 used last")

	h.send(t, "tg:3", chat("three"))
	h.replyWithText(t, "echo: three")
	hibernated := h.event(t, spawner.EventHibernated)
	if hibernated.AgentID != second.AgentID || hibernated.Topic != "tg:2" || hibernated.Reason != spawner.ReasonCapacity {
		t.Errorf("hibernated %+v: want tg:2's agent %s, for capacity", hibernated, second.AgentID)
	}
	if st := h.sp.Stats(); st.Running > 2 || st.Hibernated != 1 {
		t.Errorf("stats %+v: want at most 2 running, 1 hibernated", st)
	}

	h.send(t, "tg:2", chat("two again"))
	if r := h.replyWithText(t, "echo: two again"); r.AgentID != second.AgentID {
		t.Errorf("tg:2 answered by %s, want its agent %s", r.AgentID, second.AgentID)
	}
	// tg:1 had been used before tg:3, and not since: its agent made
	// room this time, and went before tg:2's woke.
	if again := h.event(t, spawner.EventHibernated); again.AgentID != first.AgentID {
		t.Errorf("hibernated %+v: want tg:1's agent %s", again, first.AgentID)
	}
	woken := h.event(t, spawner.EventWoken)
	if woken.AgentID != second.AgentID || woken.Reason != spawner.ReasonMessage || woken.Workspace != hibernated.Workspace {
		t.Errorf("woken %+v: want %s in %s, for a message", woken, second.AgentID, hibernated.Workspace)
	}
}

// TestCapacityWaitIsServedWhenAPlaceFrees: when every agent holds a
// delivery, a new conversation waits in the spawner's queue while the bus
// holds its message, and is served as soon as one answers, not after a
// backoff; the busy agent is not stopped before it has answered.
func TestCapacityWaitIsServedWhenAPlaceFrees(t *testing.T) {
	t.Parallel()
	h := newHarness(t, spawner.Options{MaxAgents: 1}, &bus.Options{RetryBaseDelay: 5 * time.Second})
	h.send(t, "tg:10", chat("warm up"))
	busy := h.reply(t)
	// The spawner learns that the agent answered from the bus's idle
	// event, after the reply; until then it could take the warm-up's
	// busy state for the slow message's, and make room with the agent
	// as the slow message reaches it.
	ready := h.event(t, spawner.EventReady)
	readyAt, _ := time.Parse(time.RFC3339Nano, ready.Timestamp)
	require.Eventually(t, func() bool {
		agents := h.sp.Agents()
		return len(agents) == 1 && !agents[0].Busy && agents[0].LastActive.After(readyAt)
	}, wait, 10*time.Millisecond, "the spawner to see the warm-up answered")

	const hold = 1500 * time.Millisecond
	go h.client.SendMessage(context.Background(), "tg:10", slowChat("slow", hold), nil)
	require.Eventually(t, func() bool {
		agents := h.sp.Agents()
		return len(agents) == 1 && agents[0].Busy
	}, wait, 10*time.Millisecond, "the agent to be busy")
	sent := make(chan *protocol.SendMessageResult, 1)
	go func() {
		res, err := h.client.SendMessage(context.Background(), "tg:11", chat("waiting"), nil)
		if err != nil {
			t.Errorf("send to tg:11: %v", err)
		}
		sent <- res
	}()
	require.Eventually(t, func() bool { return h.sp.Stats().Waiting == 1 }, wait, 10*time.Millisecond, "the new conversation to wait")
	// It waits in the spawner's queue, not in the delivery: the bus has
	// the spawner's answer and holds the message.
	var res *protocol.SendMessageResult
	select {
	case res = <-sent:
	case <-time.After(wait):
		t.Fatal("the waiting conversation's publish got no answer")
	}
	if res == nil || len(res.Acks) != 1 || !res.Acks[0].Retrying || !strings.Contains(res.Acks[0].Message, "queued for a place") {
		t.Fatalf("the waiting conversation's publish: %+v, want the spawner's should_retry, queued", res)
	}

	slow := h.replyWithText(t, "echo: slow")
	answeredAt := time.Now()
	if slow.AgentID != busy.AgentID {
		t.Errorf("slow message answered by %s, want %s", slow.AgentID, busy.AgentID)
	}
	h.replyWithText(t, "echo: waiting")
	// The bus's own retry of the held message would come after 30s; the
	// wait ends with the busy agent's hibernation and the new agent's
	// start, whose subscribe has the bus route the message at once.
	if gap := time.Since(answeredAt); gap > 3*time.Second {
		t.Errorf("the waiting conversation was served %s after a place freed", gap)
	}
	if ev := h.event(t, spawner.EventHibernated); ev.AgentID != busy.AgentID || ev.Reason != spawner.ReasonCapacity {
		t.Errorf("hibernated %+v", ev)
	}
}

// TestBurstBeyondHandlersIsServed is issue 23's burst at a small scale:
// more new conversations at once than the spawner has handlers, through
// fewer agents. Each conversation waiting for a place held a handler, so
// the bus's events of the agents subscribing were refused for want of
// one and lost (the bus never sends an event again): no agent was seen
// ready, every spawn timed out, and nothing was served. Now a waiting
// conversation holds no handler (it is queued, its message held by the
// bus), and the client events have handlers of their own; every
// conversation is answered, none dead-lettered, no spawn fails.
func TestBurstBeyondHandlersIsServed(t *testing.T) {
	t.Parallel()
	opts := spawner.Options{MaxAgents: 2}
	spawner.SetHandlers(&opts, 2)
	h := newHarness(t, opts, nil)
	const conversations = 8
	sent := make(chan error, conversations)
	for i := range conversations {
		go func() {
			_, err := h.client.SendMessage(context.Background(), fmt.Sprintf("tg:burst-%d", i), chat("hello"), nil)
			sent <- err
		}()
	}
	for range conversations {
		require.NoError(t, <-sent)
	}
	answered := map[string]bool{}
	for len(answered) < conversations {
		r := h.reply(t)
		answered[r.topic] = true
	}
	for i := range conversations {
		require.True(t, answered[fmt.Sprintf("outbound:burst-%d", i)], "burst-%d answered", i)
	}
	if list, _, err := h.bus.Store.ListDeadLetters(store.Filter{}, "", 10); err != nil || len(list) != 0 {
		t.Errorf("dead letters %v, %v; want none", list, err)
	}
	if log := h.log.String(); strings.Contains(log, spawner.ErrSpawnTimeout.Error()) {
		t.Errorf("a spawn timed out:\n%s", log)
	}
}

// TestIdleAgentHibernatesOnlyAfterItsDelivery: an agent that holds a
// delivery longer than the idle timeout is not stopped until it has
// answered; then, idle, it is hibernated, and the next message wakes it
// with its id.
func TestIdleAgentHibernatesOnlyAfterItsDelivery(t *testing.T) {
	t.Parallel()
	const idle = 300 * time.Millisecond
	h := newHarness(t, spawner.Options{IdleTimeout: idle}, nil)
	h.send(t, "tg:20", slowChat("slow", 4*idle))
	r := h.replyWithText(t, "echo: slow")
	repliedAt := time.Now()
	ev := h.event(t, spawner.EventHibernated)
	if ev.AgentID != r.AgentID || ev.Reason != spawner.ReasonIdle {
		t.Errorf("hibernated %+v: want %s, idle", ev, r.AgentID)
	}
	if at, _ := time.Parse(time.RFC3339Nano, ev.Timestamp); at.Before(repliedAt.Add(-100 * time.Millisecond)) {
		t.Errorf("hibernated at %s, before its reply at %s", at, repliedAt)
	}
	require.Eventually(t, func() bool { return h.sp.Stats() == spawner.Stats{Hibernated: 1} }, wait, 10*time.Millisecond, "the agent to be reaped")

	h.send(t, "tg:20", chat("back"))
	if again := h.replyWithText(t, "echo: back"); again.AgentID != r.AgentID {
		t.Errorf("woken agent %s, want %s", again.AgentID, r.AgentID)
	}
	if woken := h.event(t, spawner.EventWoken); woken.AgentID != r.AgentID || woken.Reason != spawner.ReasonMessage {
		t.Errorf("woken %+v", woken)
	}
}

// TestRestartKeepsAgentIDs: a spawner started again on the same data
// dir gives a conversation it served before the same agent id.
func TestRestartKeepsAgentIDs(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	h := newHarness(t, spawner.Options{WorkspaceRoot: root}, nil)
	h.send(t, "tg:30", chat("before"))
	before := h.reply(t)
	h.shutdown(t)

	bin, err := echoAgent()
	if err != nil {
		t.Fatal(err)
	}
	log := &syncBuffer{}
	sp, err := spawner.New(&spawner.Options{BusURL: h.bus.URL, Command: []string{bin}, WorkspaceRoot: root, Logger: slog.New(slog.NewTextHandler(log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if st := sp.Stats(); st.Hibernated != 1 {
		t.Errorf("stats after restart %+v: want tg:30 hibernated", st)
	}
	ctx, stop := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- sp.Run(ctx) }()
	defer func() {
		stop()
		if err := <-stopped; err != nil {
			t.Errorf("Run: %v", err)
		}
		if t.Failed() {
			t.Logf("second spawner's log:\n%s", log)
		}
	}()
	require.Eventually(t, func() bool { return strings.Contains(log.String(), "spawner serving") }, wait, 10*time.Millisecond, "the second spawner to serve")
	h.send(t, "tg:30", chat("after"))
	if after := h.replyWithText(t, "echo: after"); after.AgentID != before.AgentID {
		t.Errorf("after the restart tg:30 is served by %s, before by %s", after.AgentID, before.AgentID)
	}
}

// slowStop is an agent wrapper that stops its agent a second after it is
// asked to, and marks the moment it was asked in its workspace: the agent
// runs in a session of its own, out of reach of the spawner's signal to
// the wrapper's process group.
const slowStop = `setsid "$1" &
child=$!
trap 'touch "$BUB_WORKSPACE/stopping"; sleep 1; kill -TERM $child; wait $child; exit 0' TERM
wait $child
`

// TestMessageToAStoppingAgentReachesItsNextStart: a message the bus
// delivers to an agent the spawner is hibernating, which is stopped with
// the message in hand, is delivered again to the agent's next start,
// woken for it with the same id.
func TestMessageToAStoppingAgentReachesItsNextStart(t *testing.T) {
	t.Parallel()
	bin, err := echoAgent()
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(t.TempDir(), "slow-stop.sh")
	if err := os.WriteFile(script, []byte(slowStop), 0o600); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, spawner.Options{Command: []string{"/bin/sh", script, bin}, IdleTimeout: 300 * time.Millisecond},
		&bus.Options{RetryBaseDelay: 200 * time.Millisecond, MaxAttempts: 10})
	h.send(t, "tg:40", chat("first"))
	first := h.reply(t)
	spawned := h.event(t, spawner.EventSpawned)
	require.Eventually(t, func() bool {
		_, err := os.Stat(filepath.Join(spawned.Workspace, "stopping"))
		return err == nil
	}, wait, 10*time.Millisecond, "the agent to be asked to stop")

	res := h.send(t, "tg:40", slowChat("during", 3*time.Second))
	if len(res.Acks) != 1 || res.Acks[0].ClientID != first.AgentID || !res.Acks[0].Retrying {
		t.Errorf("acks %+v: want the stopping agent's, retrying", res.Acks)
	}
	if r := h.replyWithText(t, "echo: during"); r.AgentID != first.AgentID {
		t.Errorf("answered by %s, want %s", r.AgentID, first.AgentID)
	}
	if woken := h.event(t, spawner.EventWoken); woken.AgentID != first.AgentID || woken.Reason != spawner.ReasonRetry {
		t.Errorf("woken %+v: want %s, for the retry", woken, first.AgentID)
	}
	if list, _, err := h.bus.Store.ListDeadLetters(store.Filter{}, "", 10); err != nil || len(list) != 0 {
		t.Errorf("dead letters %v, %v; want none", list, err)
	}
}

// awaitAnswered waits until the spawner has seen the first delivery to
// the new agent agentID answered: the agent is idle, and was active
// after it became ready (the bus's busy and idle events came after its
// ready event). It skips the events before agentID's ready event.
func awaitAnswered(t *testing.T, h *harness, agentID string) {
	t.Helper()
	ready := h.event(t, spawner.EventReady)
	for ready.AgentID != agentID {
		ready = h.event(t, spawner.EventReady)
	}
	readyAt, _ := time.Parse(time.RFC3339Nano, ready.Timestamp)
	require.Eventually(t, func() bool {
		for _, a := range h.sp.Agents() {
			if a.ID == agentID {
				return !a.Busy && a.LastActive.After(readyAt)
			}
		}
		return false
	}, wait, 10*time.Millisecond, "the spawner to see agent %s's first delivery answered", agentID)
}
