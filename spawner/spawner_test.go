package spawner_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/internal/leakcheck"
	"github.com/bub-bus/bub/peer"
	"github.com/bub-bus/bub/protocol"
	"github.com/bub-bus/bub/spawner"
	"github.com/stretchr/testify/require"
)

// echoAgent builds examples/echo-agent on first use: the tests start
// real agent processes, and a fuzz run or -list needs none (a fuzz
// worker restarting would otherwise wait for the build each time). It
// goes beside the test binary, in go test's work directory, which go
// test removes afterwards: leakcheck.Main exits, so TestMain cannot.
var echoAgent = sync.OnceValues(func() (string, error) {
	bin := filepath.Join(filepath.Dir(os.Args[0]), "echo-agent")
	if out, err := exec.Command("go", "build", "-o", bin, "../examples/echo-agent").CombinedOutput(); err != nil {
		return "", fmt.Errorf("build echo-agent: %v: %s", err, out)
	}
	return bin, nil
})

func TestMain(m *testing.M) { leakcheck.Main(m) }

// wait bounds every wait of these tests.
const wait = 20 * time.Second

// harness is a bus, a spawner on it, and a test peer that collects the
// agents' replies on outbound:* and the spawner's events on system:agent.*.
type harness struct {
	bus     *bustest.Server
	sp      *spawner.Spawner
	client  *peer.Conn
	replies chan reply
	events  chan spawner.Event
	log     *syncBuffer
	stopped chan error
	stop    context.CancelFunc
}

// reply is what the echo agent sends.
type reply struct {
	Type    string `json:"type"`
	Text    string `json:"text"`
	ChatID  any    `json:"chat_id"`
	AgentID string `json:"agent_id"`
	topic   string
}

// syncBuffer is a log sink the spawner's goroutines write to.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func newHarness(t *testing.T, opts spawner.Options, busOpts *bus.Options) *harness {
	t.Helper()
	return newHarnessAs(t, opts, busOpts, "")
}

// newHarnessAs is newHarness whose test peer presents token.
func newHarnessAs(t *testing.T, opts spawner.Options, busOpts *bus.Options, token string) *harness {
	t.Helper()
	h := &harness{
		bus:     bustest.Start(t, busOpts),
		replies: make(chan reply, 100),
		events:  make(chan spawner.Event, 100),
		log:     &syncBuffer{},
		stopped: make(chan error, 1),
	}
	var err error
	h.client, err = peer.Dial(context.Background(), h.bus.URL, &peer.Options{ClientID: "tester", Token: token, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.client.Close() })
	ctx := context.Background()
	collect := func(_ context.Context, d *peer.Delivery) (peer.Result, error) {
		r := reply{topic: d.Topic}
		if err := d.Decode(&r); err != nil {
			return peer.Result{}, err
		}
		h.replies <- r
		return peer.Result{Processed: true}, nil
	}
	if err := h.client.Subscribe(ctx, "outbound:*", collect, nil); err != nil {
		t.Fatal(err)
	}
	events := func(_ context.Context, d *peer.Delivery) (peer.Result, error) {
		var ev spawner.Event
		if err := d.Decode(&ev); err != nil {
			return peer.Result{}, err
		}
		if d.Topic != "system:agent."+ev.Event {
			t.Errorf("event %q on topic %s", ev.Event, d.Topic)
		}
		h.events <- ev
		return peer.Result{}, nil
	}
	if err := h.client.Subscribe(ctx, "system:agent.*", events, &peer.SubscribeOptions{Policy: protocol.PolicyContinueAll}); err != nil {
		t.Fatal(err)
	}

	// A test may list other nodes before the bus, as for a cluster.
	opts.BusURL = strings.TrimPrefix(opts.BusURL+","+h.bus.URL, ",")
	if opts.Command == nil {
		bin, err := echoAgent()
		if err != nil {
			t.Fatal(err)
		}
		opts.Command = []string{bin}
	}
	if opts.WorkspaceRoot == "" {
		opts.WorkspaceRoot = t.TempDir()
	}
	opts.Logger = slog.New(slog.NewTextHandler(h.log, nil))
	h.sp, err = spawner.New(&opts)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	h.stop = stop
	go func() { h.stopped <- h.sp.Run(runCtx) }()
	t.Cleanup(func() {
		h.shutdown(t)
		if t.Failed() {
			t.Logf("spawner log:\n%s", h.log)
		}
	})
	// The spawner serves once its fallback is in place: a message then
	// gets an ack from it instead of no_subscribers.
	require.Eventually(t, func() bool {
		return strings.Contains(h.log.String(), "spawner serving")
	}, wait, 10*time.Millisecond, "the spawner to subscribe")
	return h
}

// shutdown stops the spawner and checks it stopped cleanly.
func (h *harness) shutdown(t *testing.T) {
	h.stop()
	select {
	case err := <-h.stopped:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
		h.stopped <- err
	case <-time.After(wait):
		t.Errorf("spawner did not stop")
	}
}

// send publishes a chat message and returns the bus's result.
func (h *harness) send(t *testing.T, topic string, payload map[string]any) *protocol.SendMessageResult {
	t.Helper()
	res, err := h.client.SendMessage(context.Background(), topic, payload, nil)
	if err != nil {
		t.Fatalf("send to %s: %v", topic, err)
	}
	return res
}

// reply waits for the next reply.
func (h *harness) reply(t *testing.T) reply {
	t.Helper()
	select {
	case r := <-h.replies:
		return r
	case <-time.After(wait):
		t.Fatal("no reply")
		return reply{}
	}
}

// replyWithText waits for the reply whose text is text, skipping others:
// delivery is at least once, so a message whose agent died before the bus
// read its answer is answered again.
func (h *harness) replyWithText(t *testing.T, text string) reply {
	t.Helper()
	for {
		if r := h.reply(t); r.Text == text {
			return r
		}
	}
}

// event waits for the next lifecycle event named name, skipping others.
func (h *harness) event(t *testing.T, name string) spawner.Event {
	t.Helper()
	deadline := time.After(wait)
	for {
		select {
		case ev := <-h.events:
			if ev.Event == name {
				return ev
			}
		case <-deadline:
			t.Fatalf("no %s event", name)
			return spawner.Event{}
		}
	}
}

func chat(text string) map[string]any {
	return map[string]any{"type": "telegram_message", "text": text}
}

// TestFirstMessageReachesNewAgent is the spawner's core promise: the first
// message to a new chat is answered by the agent spawned for it, which
// then keeps the conversation.
func TestFirstMessageReachesNewAgent(t *testing.T) {
	t.Parallel()
	h := newHarness(t, spawner.Options{}, nil)
	res := h.send(t, "tg:42", chat("hi"))
	if !res.Success {
		t.Fatalf("first message not routed: %+v", res)
	}
	r := h.reply(t)
	if r.topic != "outbound:42" || r.Text != "echo: hi" || r.ChatID != "42" || r.Type != "plaintext_message" {
		t.Fatalf("reply %+v", r)
	}
	spawned := h.event(t, spawner.EventSpawned)
	ready := h.event(t, spawner.EventReady)
	if spawned.AgentID != r.AgentID || ready.AgentID != r.AgentID || spawned.Topic != "tg:42" || spawned.PID == 0 {
		t.Errorf("events %+v, %+v for reply from %s", spawned, ready, r.AgentID)
	}
	if filepath.Base(spawned.Workspace) != spawner.WorkspaceName("tg:42") {
		t.Errorf("workspace %s", spawned.Workspace)
	}

	// The second message goes to the same agent, directly.
	res = h.send(t, "tg:42", map[string]any{"type": "plaintext_message", "text": "again", "chat_id": 42})
	if len(res.Acks) != 1 || res.Acks[0].ClientID != r.AgentID || !res.Acks[0].Processed {
		t.Errorf("second message acks %+v, want one processed by %s", res.Acks, r.AgentID)
	}
	if r2 := h.reply(t); r2.AgentID != r.AgentID || r2.Text != "echo: again" || r2.ChatID != float64(42) {
		t.Errorf("second reply %+v", r2)
	}
	if agents := h.sp.Agents(); len(agents) != 1 || !agents[0].Ready || agents[0].Topic != "tg:42" {
		t.Errorf("agents %+v", agents)
	}
}

// With several bus URLs (a cluster's nodes), the spawner connects to the
// first that answers, and its agents get the whole list as BUB_BUS_URL:
// an agent, too, must be able to move to another node.
func TestAgentsGetEveryBusURL(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "ws://" + ln.Addr().String() + "/"
	ln.Close()
	bin, err := echoAgent()
	if err != nil {
		t.Fatal(err)
	}
	seen := filepath.Join(t.TempDir(), "bus-url")
	h := newHarness(t, spawner.Options{
		BusURL:  down,
		Command: []string{"/bin/sh", "-c", `printf %s "$BUB_BUS_URL" > "$0" && exec "$1"`, seen, bin},
	}, nil)
	if res := h.send(t, "tg:7", chat("hi")); !res.Success {
		t.Fatalf("first message not routed: %+v", res)
	}
	if r := h.reply(t); r.Text != "echo: hi" {
		t.Fatalf("reply %+v", r)
	}
	got, err := os.ReadFile(seen)
	if err != nil {
		t.Fatal(err)
	}
	if want := down + "," + h.bus.URL; string(got) != want {
		t.Errorf("the agent's BUB_BUS_URL is %q, want %q", got, want)
	}
}

// TestConcurrentFirstMessagesShareOneSpawn sends several first messages
// to one new chat at once: one agent starts, and it answers each once.
func TestConcurrentFirstMessagesShareOneSpawn(t *testing.T) {
	t.Parallel()
	h := newHarness(t, spawner.Options{}, nil)
	const n = 8
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { h.send(t, "tg:7", chat(fmt.Sprint(i))) })
	}
	wg.Wait()
	got := map[string]int{}
	agents := map[string]bool{}
	for range n {
		r := h.reply(t)
		got[r.Text]++
		agents[r.AgentID] = true
	}
	for i := range n {
		if got[fmt.Sprintf("echo: %d", i)] != 1 {
			t.Errorf("replies %v: want each of %d once", got, n)
			break
		}
	}
	if len(agents) != 1 {
		t.Errorf("replies came from %d agents: %v", len(agents), agents)
	}
	select {
	case r := <-h.replies:
		t.Errorf("extra reply %+v", r)
	case <-time.After(200 * time.Millisecond):
	}
}

// TestSpawnTimeout: an agent that never subscribes to its topic is
// stopped, and the failure is reported.
func TestSpawnTimeout(t *testing.T) {
	t.Parallel()
	h := newHarness(t, spawner.Options{Command: []string{"sleep", "60"}, SpawnTimeout: 300 * time.Millisecond}, nil)
	res := h.send(t, "tg:1", chat("hello?"))
	if len(res.Acks) != 1 || !strings.Contains(res.Acks[0].Message, "spawn timeout") {
		t.Errorf("acks %+v: want the spawner's, saying spawn timeout", res.Acks)
	}
	failed := h.event(t, spawner.EventSpawnFailed)
	if !strings.Contains(failed.Error, "spawn timeout") || failed.Topic != "tg:1" {
		t.Errorf("spawn_failed %+v", failed)
	}
	exited := h.event(t, spawner.EventExited)
	if exited.ExitCode == nil || *exited.ExitCode != -1 || !strings.Contains(exited.Status, "terminated") || exited.Restarting {
		t.Errorf("exited %+v: want terminated by the spawner, not restarting", exited)
	}
	require.Eventually(t, func() bool { return len(h.sp.Agents()) == 0 }, wait, 10*time.Millisecond, "the agent to be reaped")
}

// TestExitBeforeReadyBacksOff: an agent that exits at once fails its
// spawn; failures in a row back off.
func TestExitBeforeReadyBacksOff(t *testing.T) {
	t.Parallel()
	h := newHarness(t, spawner.Options{Command: []string{"sh", "-c", "echo no bus here >&2; exit 3"}, RestartDelay: time.Hour}, nil)
	res := h.send(t, "tg:2", chat("one"))
	if len(res.Acks) != 1 || !strings.Contains(res.Acks[0].Message, "exited before subscribing") {
		t.Errorf("acks %+v", res.Acks)
	}
	if ev := h.event(t, spawner.EventExited); ev.ExitCode == nil || *ev.ExitCode != 3 {
		t.Errorf("exited %+v", ev)
	}
	if !strings.Contains(h.log.String(), "no bus here") {
		t.Errorf("the agent's stderr is not in the log:\n%s", h.log)
	}
	// The bus routes it again soon (the spawner asks for no delay after
	// a first failure, so the bus's own retry backoff applies): the
	// second try fails too, and the third waits.
	require.Eventually(t, func() bool {
		return strings.Contains(h.log.String(), "next_start") || strings.Count(h.log.String(), "agent spawn_failed") >= 2
	}, wait, 10*time.Millisecond, "a backed-off answer")
	res = h.send(t, "tg:2", chat("two"))
	if len(res.Acks) != 1 || !strings.Contains(res.Acks[0].Message, "backing off") {
		t.Errorf("acks %+v: want a backoff", res.Acks)
	}
}

// TestCrashedAgentRestartsWithItsID: an agent killed while it holds a
// message comes back with the same id, and the bus's retry of that
// message reaches it.
func TestCrashedAgentRestartsWithItsID(t *testing.T) {
	t.Parallel()
	h := newHarness(t, spawner.Options{}, &bus.Options{RetryBaseDelay: 100 * time.Millisecond})
	h.send(t, "tg:5", chat("hello"))
	first := h.reply(t)
	spawned := h.event(t, spawner.EventSpawned)

	sent := make(chan *protocol.SendMessageResult, 1)
	go func() {
		res, _ := h.client.SendMessage(context.Background(), "tg:5", map[string]any{"type": "telegram_message", "text": "slow", "delay_ms": 1500}, nil)
		sent <- res
	}()
	require.Eventually(t, func() bool {
		return strings.Count(h.log.String(), "handling message") >= 2
	}, wait, 10*time.Millisecond, "the agent to take the slow message")
	proc, err := os.FindProcess(spawned.PID)
	if err != nil {
		t.Fatal(err)
	}
	if err := proc.Kill(); err != nil {
		t.Fatal(err)
	}
	exited := h.event(t, spawner.EventExited)
	if !exited.Restarting || exited.AgentID != first.AgentID {
		t.Errorf("exited %+v: want a restart of %s", exited, first.AgentID)
	}
	select {
	case res := <-sent:
		if res == nil || len(res.Acks) != 1 || !res.Acks[0].Retrying {
			t.Errorf("in-flight message result %+v: want a retry scheduled", res)
		}
	case <-time.After(wait):
		t.Fatal("no result for the in-flight message")
	}
	r := h.replyWithText(t, "echo: slow")
	if r.AgentID != first.AgentID {
		t.Errorf("reply after the crash %+v, want echo: slow from %s", r, first.AgentID)
	}
	if agents := h.sp.Agents(); len(agents) != 1 || agents[0].PID == spawned.PID {
		t.Errorf("agents %+v: want one new process", agents)
	}
}

// TestNewRefusesBadOptions: mistakes surface at New, naming what is wrong.
func TestNewRefusesBadOptions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts spawner.Options
		want string
	}{
		{"no command", spawner.Options{}, "no agent command"},
		{"missing program", spawner.Options{Command: []string{"/nonexistent/agent"}}, "/nonexistent/agent"},
		{"bad pattern", spawner.Options{Command: []string{"sh"}, Patterns: []string{"tg:{a,b}"}}, "tg:{a,b}"},
		{"bad client id", spawner.Options{Command: []string{"sh"}, ClientID: "a b"}, "clientId"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.opts.WorkspaceRoot = t.TempDir()
			_, err := spawner.New(&tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New: %v, want an error mentioning %q", err, tt.want)
			}
		})
	}
}

// TestRunEndsWhenTakenOver: a second spawner with the same clientId takes
// over, and the first stops, with its agents.
func TestRunEndsWhenTakenOver(t *testing.T) {
	t.Parallel()
	h := newHarness(t, spawner.Options{}, nil)
	h.send(t, "tg:9", chat("hi"))
	h.reply(t)
	other, err := peer.Dial(context.Background(), h.bus.URL, &peer.Options{ClientID: "spawner", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	select {
	case err := <-h.stopped:
		if !errors.Is(err, peer.ErrTakenOver) {
			t.Errorf("Run: %v, want ErrTakenOver", err)
		}
		h.stopped <- nil
	case <-time.After(wait):
		t.Fatal("spawner still runs after a takeover")
	}
	if agents := h.sp.Agents(); len(agents) != 0 {
		t.Errorf("agents left running: %+v", agents)
	}
}

// TestCleanExitIsFinalUntilADirectMessage: an agent that exits 0 is not
// restarted, and a message on its agent:{id} brings it back, with its
// topic and id, instead of spawning a stranger.
func TestCleanExitIsFinalUntilADirectMessage(t *testing.T) {
	t.Parallel()
	h := newHarness(t, spawner.Options{}, nil)
	h.send(t, "tg:8", chat("hi"))
	first := h.reply(t)
	spawned := h.event(t, spawner.EventSpawned)
	proc, err := os.FindProcess(spawned.PID)
	if err != nil {
		t.Fatal(err)
	}
	if err := proc.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if exited := h.event(t, spawner.EventExited); exited.Restarting || exited.ExitCode == nil || *exited.ExitCode != 0 {
		t.Errorf("exited %+v: want status 0, no restart", exited)
	}
	require.Eventually(t, func() bool { return len(h.sp.Agents()) == 0 }, wait, 10*time.Millisecond, "the agent to be reaped")

	res := h.send(t, peer.AgentTopic(first.AgentID), map[string]any{"type": "plaintext_message", "text": "direct"})
	if !res.Success {
		t.Fatalf("direct message: %+v", res)
	}
	b, _ := json.Marshal(res)
	t.Logf("direct message: %s", b)
	t.Cleanup(func() {
		if t.Failed() {
			resp, err := http.Get(h.bus.HTTP.URL + "/v1/events?messageId=" + res.MessageID)
			if err == nil {
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				t.Logf("the bus's journal of the direct message: %s", body)
			}
		}
	})
	r := h.replyWithText(t, "echo: direct")
	if r.AgentID != first.AgentID || r.topic != "outbound:8" {
		t.Errorf("reply %+v: want agent %s answering for tg:8", r, first.AgentID)
	}
	if again := h.event(t, spawner.EventSpawned); again.Topic != "tg:8" || again.Workspace != spawned.Workspace {
		t.Errorf("second spawn %+v: want tg:8 in %s", again, spawned.Workspace)
	}
}
