package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bub-bus/bub/internal/proctree"
	"github.com/bub-bus/bub/peer"
	"github.com/bub-bus/bub/protocol"
	"github.com/bub-bus/bub/spawner"
)

// The wake scenario (issue 23) measures the agent lifecycle with the
// real binaries: bub serve, bub spawner and examples/echo-agent.
//
//   - wake to first delivery: an agent that subscribes its conversation
//     durably (ECHO_DURABLE=1) and was hibernated by the spawner
//     (--idle-timeout) gets the conversation's next message: the bus
//     holds it for the away agent and tells the spawner, its waker,
//     which starts it; the agent subscribes again and is delivered the
//     message. Timed from the publish until the agent's reply reaches
//     the harness on outbound:{chat}, next to spawn to first delivery
//     of never-started conversations on the same bus and spawner, timed
//     the same way, so the ratio compares like with like (the reply's
//     own trip, well under a millisecond, is in both).
//   - bus memory per durable subscription of a hibernated agent: the
//     bus's BenchmarkDurableAwayMemory (10,000 away owners), run with go
//     test as the route scenario runs BenchmarkRoute.
//   - many conversations, few processes: -conversations (1,000) first
//     messages of new conversations, sent at once, through bub spawner
//     --max-agents 16 --idle-timeout 1s: every one answered, none
//     dead-lettered, and never more than 16 agent processes (counted in
//     /proc as the spawner's children, every 2 ms, and from the
//     spawner's spawned and exited events).

// Scale scenario parameters, issue 23's target: 1,000 conversations
// served with 16 processes.
const (
	scaleMaxAgents   = 16
	scaleIdleTimeout = time.Second
	// scaleLimit bounds the wait for every conversation's answer.
	scaleLimit = 5 * time.Minute
	// scalePerPublisher is how many of the messages one publisher's
	// connection sends; below the SDK's 256 requests in flight.
	scalePerPublisher = 200
)

// wakeIdleTimeout is the spawner's --idle-timeout in the wake runs:
// short, so that the spawned agents are hibernated soon after their
// first answer.
const wakeIdleTimeout = 300 * time.Millisecond

// wakeResult is the wake scenario's figures.
type wakeResult struct {
	// Spawn and Wake are spawn to first delivery and wake to first
	// delivery, each a cell of the bus alone, run per round.
	Spawn cell `json:"spawn"`
	Wake  cell `json:"wake"`
	// WakeOverSpawnP50 is the median over rounds of the round's wake p50
	// over its spawn p50; target ≤ 2.
	WakeOverSpawnP50 float64 `json:"wake_over_spawn_p50"`
	// AwayBytesPerSub is BenchmarkDurableAwayMemory's bytes of bus heap
	// per durable subscription of an away owner; target < 1,024.
	AwayBytesPerSub float64 `json:"away_bytes_per_subscription"`
	// Scale is the many-conversations run.
	Scale *scaleResult `json:"scale,omitempty"`
	// Load is the machine's load average (1, 5, 15 min) when the
	// scenario started, from /proc/loadavg.
	Load string `json:"load_average"`
}

// scaleResult is one run of many conversations through few agents.
type scaleResult struct {
	Conversations int     `json:"conversations"`
	MaxAgents     int     `json:"max_agents"`
	IdleTimeout   string  `json:"idle_timeout"`
	Answered      int     `json:"answered"`
	DeadLetters   int     `json:"dead_letters"`
	MaxProcesses  int     `json:"max_agent_processes"`
	Seconds       float64 `json:"seconds"`
	// Latencies from each first message's publish to its answer, in
	// microseconds.
	P50 float64 `json:"p50_us"`
	P99 float64 `json:"p99_us"`
	Max float64 `json:"max_us"`
	// Spawns, Hibernations (of which ForCapacity to make room) and
	// Wakes are the spawner's events over the run.
	Spawns       int64  `json:"spawns"`
	Hibernations int64  `json:"hibernations"`
	ForCapacity  int64  `json:"hibernations_for_capacity"`
	Wakes        int64  `json:"wakes"`
	Load         string `json:"load_average"`
}

// met reports whether the run meets issue 23's target.
func (s *scaleResult) met() bool {
	return s.Answered == s.Conversations && s.DeadLetters == 0 && s.MaxProcesses <= s.MaxAgents
}

func (h *harness) wake() error {
	agent, err := h.buildEchoAgent()
	if err != nil {
		return err
	}
	r := &wakeResult{Load: loadAverage()}
	var spawns, wakes []stats
	var ratios []float64
	for range h.cfg.rounds {
		err := h.withFreshBus(func(bus *process) error {
			s, w, err := h.wakeRun(bus, agent)
			spawns, wakes = append(spawns, s), append(wakes, w)
			ratios = append(ratios, div(w.P50, s.P50))
			return err
		})
		if err != nil {
			return fmt.Errorf("wake to first delivery: %w", err)
		}
	}
	r.Spawn = newCell(fmt.Sprintf("spawn to first delivery, echo agent (%d)", h.cfg.spawns), map[string][]stats{"bus": spawns}, lowerIsBetter)
	r.Wake = newCell(fmt.Sprintf("wake to first delivery, durable (%d)", h.cfg.spawns), map[string][]stats{"bus": wakes}, lowerIsBetter)
	r.WakeOverSpawnP50 = median(ratios, func(f float64) float64 { return f })
	log.Print(r.Spawn.busSummary())
	log.Print(r.Wake.busSummary())
	log.Printf("wake p50 / spawn p50: %.2f", r.WakeOverSpawnP50)

	if r.AwayBytesPerSub, err = h.awayMemory(); err != nil {
		return err
	}
	log.Printf("bus memory per durable subscription of an away owner: %.0f B", r.AwayBytesPerSub)

	err = h.withFreshBus(func(bus *process) error {
		s, err := h.scaleRun(bus, agent)
		r.Scale = s
		return err
	})
	if err != nil {
		return fmt.Errorf("%d conversations through %d agents: %w", h.cfg.conversations, scaleMaxAgents, err)
	}
	s := r.Scale
	log.Printf("%d conversations through --max-agents %d --idle-timeout %s: %d answered in %.1fs, p50 %s p99 %s; %d dead letters; at most %d agent processes; %d spawns (%d wakes), %d hibernations (%d for capacity) (load %s)",
		s.Conversations, s.MaxAgents, s.IdleTimeout, s.Answered, s.Seconds, us(s.P50), us(s.P99), s.DeadLetters, s.MaxProcesses, s.Spawns, s.Wakes, s.Hibernations, s.ForCapacity, s.Load)
	h.res.Wake = r
	return nil
}

// buildEchoAgent builds examples/echo-agent into the temp dir.
func (h *harness) buildEchoAgent() (string, error) {
	bin := filepath.Join(h.tmp, "echo-agent")
	cmd := exec.Command("go", "build", "-o", bin, "./examples/echo-agent")
	cmd.Dir = h.cfg.root
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build examples/echo-agent in %s: %w", cmd.Dir, err)
	}
	return bin, nil
}

// conversations is the harness's side of a spawner's conversations: a
// peer that takes every agent's reply on outbound:* and counts the
// spawner's hibernations and spawns.
type conversations struct {
	conn    *peer.Conn
	replies chan answer
	// first is when each chat's first reply came.
	mu    sync.Mutex
	first map[string]time.Time

	spawned, hibernated atomic.Int64
	hibernatedNow       chan struct{} // a token per hibernation
	// running is the spawner's agent processes by its events (spawned
	// less exited), maxRunning the most at any time.
	running, maxRunning atomic.Int64
	// forCapacity counts the hibernations to make room, woken the
	// agents started again.
	forCapacity, woken atomic.Int64
}

// answer is a reply, by the chat it answers and when it came.
type answer struct {
	chat string
	at   time.Time
}

// watchConversations connects to bus as clientID and subscribes to the
// agents' replies and the spawner's events.
func watchConversations(bus *process, clientID string) (*conversations, error) {
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	defer cancel()
	conn, err := peer.Dial(ctx, "ws://"+bus.addr+"/", &peer.Options{ClientID: clientID, NoReconnect: true, MaxConcurrentHandlers: 4096, Logger: sdkLogger})
	if err != nil {
		return nil, fmt.Errorf("dial bus as %s: %w", clientID, err)
	}
	c := &conversations{conn: conn, replies: make(chan answer, 4096), first: make(map[string]time.Time), hibernatedNow: make(chan struct{}, 4096)}
	err = conn.Subscribe(ctx, "outbound:*", func(_ context.Context, d *peer.Delivery) (peer.Result, error) {
		a := answer{chat: strings.TrimPrefix(d.Topic, "outbound:"), at: time.Now()}
		c.mu.Lock()
		if _, seen := c.first[a.chat]; !seen {
			c.first[a.chat] = a.at
		}
		c.mu.Unlock()
		select {
		case c.replies <- a:
		default: // nobody waits for one reply at a time in the scale run
		}
		return peer.Result{Processed: true}, nil
	}, nil)
	if err == nil {
		err = conn.Subscribe(ctx, "system:agent.*", func(_ context.Context, d *peer.Delivery) (peer.Result, error) {
			var ev spawner.Event
			if d.Decode(&ev) == nil {
				switch ev.Event {
				case spawner.EventSpawned:
					c.spawned.Add(1)
					// In order, one at a time: the spawner
					// publishes each event once the last was
					// answered by every subscriber.
					if now := c.running.Add(1); now > c.maxRunning.Load() {
						c.maxRunning.Store(now)
					}
				case spawner.EventExited:
					c.running.Add(-1)
				case spawner.EventWoken:
					c.woken.Add(1)
				case spawner.EventHibernated:
					c.hibernated.Add(1)
					if ev.Reason == spawner.ReasonCapacity {
						c.forCapacity.Add(1)
					}
					select {
					case c.hibernatedNow <- struct{}{}:
					default:
					}
				}
			}
			return peer.Result{}, nil
		}, &peer.SubscribeOptions{Policy: protocol.PolicyContinueAll})
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("subscribe the replies and the spawner's events: %w", err)
	}
	return c, nil
}

// chatMessage is a first message of conversation chat, as the echo agent
// answers it on outbound:{chat}.
func chatMessage(chat, text string) map[string]any {
	return map[string]any{"type": "telegram_message", "text": text, "chat_id": chat}
}

// converse publishes text to tg:{chat} and returns the time until the
// chat's reply, and the bus's result. With waitSpawner it publishes again
// while nobody serves the topic yet (the spawner is still connecting).
func (c *conversations) converse(chat, text string, waitSpawner bool) (time.Duration, *protocol.SendMessageResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), durableLimit)
	defer cancel()
	topic := "tg:" + chat
	var start time.Time
	var res *protocol.SendMessageResult
	for {
		start = time.Now()
		var err error
		if res, err = c.conn.SendMessage(ctx, topic, chatMessage(chat, text), nil); err != nil {
			return 0, nil, fmt.Errorf("publish to %s: %w", topic, err)
		}
		if !res.NoSubscribers() {
			break
		}
		if !waitSpawner {
			return 0, nil, fmt.Errorf("publish to %s: nobody serves it", topic)
		}
		select {
		case <-ctx.Done():
			return 0, nil, fmt.Errorf("publish to %s: the spawner did not subscribe tg:* within %s", topic, durableLimit)
		case <-time.After(20 * time.Millisecond):
		}
	}
	for {
		select {
		case a := <-c.replies:
			if a.chat == chat {
				return a.at.Sub(start), res, nil
			}
			// A late duplicate of an earlier conversation's reply
			// (delivery is at least once).
		case <-ctx.Done():
			return 0, nil, fmt.Errorf("%s: no reply within %s", topic, durableLimit)
		}
	}
}

// wakeRun starts a spawner whose echo agents subscribe durably, spawns
// h.cfg.spawns conversations one after another (after an unmeasured one
// that waits for the spawner), waits until every agent is hibernated and
// its subscription is away on the bus, then sends each conversation a
// second message, one after another.
func (h *harness) wakeRun(bus *process, agent string) (spawn, wake stats, err error) {
	sp, err := startSpawnerWith(h.bub, bus.addr, agent, h.tmp, []string{"ECHO_DURABLE=1"},
		"--idle-timeout", wakeIdleTimeout.String())
	if err != nil {
		return stats{}, stats{}, err
	}
	defer sp.stop()
	run := topicSeq.Add(1)
	c, err := watchConversations(bus, fmt.Sprintf("bench-wake-%d", run))
	if err != nil {
		return stats{}, stats{}, err
	}
	defer c.conn.Close()
	if _, _, err := c.converse(fmt.Sprintf("wake%d-warm", run), "warm", true); err != nil {
		return stats{}, stats{}, fmt.Errorf("first spawn: %w", err)
	}
	n := h.cfg.spawns
	chat := func(i int) string { return fmt.Sprintf("wake%d-%d", run, i) }
	t := newTracker()
	bus0, _ := bus.cpuTime()
	sp0, _ := sp.cpuTime()
	start := time.Now()
	for i := range n {
		d, _, err := c.converse(chat(i), "hello", false)
		if err != nil {
			return stats{}, stats{}, err
		}
		t.record(d.Microseconds(), false)
	}
	spawn = cpuPer(t.stats(time.Since(start), 1), bus, sp, bus0, sp0, n)

	// Every agent, the warm one's too, hibernated and away on the bus.
	if err := c.awaitHibernated(n + 1); err != nil {
		return spawn, stats{}, err
	}
	if err := awaitAway(c.conn, fmt.Sprintf("tg:wake%d-", run), n+1); err != nil {
		return spawn, stats{}, err
	}

	t = newTracker()
	bus0, _ = bus.cpuTime()
	sp0, _ = sp.cpuTime()
	start = time.Now()
	for i := range n {
		d, res, err := c.converse(chat(i), "again", false)
		if err != nil {
			return spawn, stats{}, err
		}
		if len(res.Acks) != 1 || !res.Acks[0].Held {
			return spawn, stats{}, fmt.Errorf("tg:%s: the second message was not held for the hibernated agent: %+v", chat(i), res)
		}
		t.record(d.Microseconds(), false)
	}
	wake = cpuPer(t.stats(time.Since(start), 1), bus, sp, bus0, sp0, n)
	return spawn, wake, nil
}

// cpuPer adds the bus's and the spawner's CPU per conversation since
// bus0 and sp0 to s.
func cpuPer(s stats, bus, sp *process, bus0, sp0 time.Duration, n int) stats {
	bus1, _ := bus.cpuTime()
	sp1, _ := sp.cpuTime()
	s.ServerCPUPerMsg = float64((bus1 - bus0).Microseconds()) / float64(n)
	s.HelperCPUPerMsg = float64((sp1 - sp0).Microseconds()) / float64(n)
	return s
}

// awaitHibernated waits until the spawner has reported n hibernations.
func (c *conversations) awaitHibernated(n int) error {
	limit := time.After(durableLimit)
	for c.hibernated.Load() < int64(n) {
		select {
		case <-c.hibernatedNow:
		case <-limit:
			return fmt.Errorf("%d of %d agents hibernated after %s", c.hibernated.Load(), n, durableLimit)
		}
	}
	return nil
}

// awaitAway waits until the bus lists n durable subscriptions on topics
// starting with prefix, all away: the agents' connections are gone.
func awaitAway(conn *peer.Conn, prefix string, n int) error {
	ctx, cancel := context.WithTimeout(context.Background(), durableLimit)
	defer cancel()
	for {
		away, err := countAway(ctx, conn, prefix)
		if err != nil {
			return err
		}
		if away == n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d durable subscriptions away after %s", away, n, durableLimit)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// countAway counts the away durable subscriptions on topics starting
// with prefix.
func countAway(ctx context.Context, conn *peer.Conn, prefix string) (int, error) {
	away := 0
	params := protocol.SubscriptionsListParams{Limit: 1000}
	for {
		var r protocol.SubscriptionsListResult
		if err := conn.Call(ctx, protocol.MethodSubscriptionsList, params, &r); err != nil {
			return 0, fmt.Errorf("subscriptions.list: %w", err)
		}
		for _, s := range r.Subscriptions {
			if s.Away && strings.HasPrefix(s.Pattern, prefix) {
				away++
			}
		}
		if r.NextCursor == "" {
			return away, nil
		}
		params.Cursor = r.NextCursor
	}
}

// scaleRun sends h.cfg.conversations first messages of new conversations
// at once through a spawner with --max-agents 16 and --idle-timeout 1s,
// and waits until every one is answered.
func (h *harness) scaleRun(bus *process, agent string) (*scaleResult, error) {
	n := h.cfg.conversations
	r := &scaleResult{Conversations: n, MaxAgents: scaleMaxAgents, IdleTimeout: scaleIdleTimeout.String()}
	sp, err := startSpawnerWith(h.bub, bus.addr, agent, h.tmp, nil,
		"--max-agents", strconv.Itoa(scaleMaxAgents), "--idle-timeout", scaleIdleTimeout.String(), "--spawn-timeout", "20s")
	if err != nil {
		return r, err
	}
	defer sp.stop()
	run := topicSeq.Add(1)
	c, err := watchConversations(bus, fmt.Sprintf("bench-scale-%d", run))
	if err != nil {
		return r, err
	}
	defer c.conn.Close()
	if _, _, err := c.converse(fmt.Sprintf("scale%d-warm", run), "warm", true); err != nil {
		return r, fmt.Errorf("first spawn: %w", err)
	}
	spawned0, hibernated0, capacity0, woken0 := c.spawned.Load(), c.hibernated.Load(), c.forCapacity.Load(), c.woken.Load()

	var maxProcs atomic.Int64
	stopWatch := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			if n := int64(proctree.Children(sp.pid())); n > maxProcs.Load() {
				maxProcs.Store(n)
			}
			select {
			case <-stopWatch:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	defer func() {
		close(stopWatch)
		<-watched
		r.MaxProcesses = int(max(maxProcs.Load(), c.maxRunning.Load()))
	}()

	r.Load = loadAverage()
	ctx, cancel := context.WithTimeout(context.Background(), scaleLimit)
	defer cancel()
	chat := func(i int) string { return fmt.Sprintf("scale%d-%d", run, i) }
	// The SDK keeps at most 256 requests in flight on a connection, and
	// a sendMessage to a conversation waiting for a place stays in
	// flight until its agent is found: the messages are spread over
	// enough publishers to send all at once.
	pubs := make([]*peer.Conn, (n+scalePerPublisher-1)/scalePerPublisher)
	for i := range pubs {
		dctx, dcancel := context.WithTimeout(ctx, dialTimeout)
		pubs[i], err = peer.Dial(dctx, "ws://"+bus.addr+"/", &peer.Options{ClientID: fmt.Sprintf("bench-scale-%d-p%d", run, i), NoReconnect: true, Logger: sdkLogger})
		dcancel()
		if err != nil {
			return r, fmt.Errorf("dial publisher %d: %w", i, err)
		}
		defer pubs[i].Close()
	}
	start := time.Now()
	sent := make([]time.Time, n)
	// results are the bus's answers to the publishes, to say what became
	// of a conversation left unanswered.
	results := make([]*protocol.SendMessageResult, n)
	var sendErrs atomic.Int64
	var wg sync.WaitGroup
	for i := range n {
		sent[i] = time.Now()
		wg.Go(func() {
			pub := pubs[i%len(pubs)]
			res, err := pub.SendMessage(ctx, "tg:"+chat(i), chatMessage(chat(i), "hello"), nil)
			c.mu.Lock()
			results[i] = res
			c.mu.Unlock()
			if err != nil && sendErrs.Add(1) == 1 {
				log.Printf("scale: publish to tg:%s: %v", chat(i), err)
			}
		})
	}
	for {
		c.mu.Lock()
		answered := 0
		for i := range n {
			if _, ok := c.first[chat(i)]; ok {
				answered++
			}
		}
		c.mu.Unlock()
		r.Answered = answered
		if answered == n {
			break
		}
		select {
		case <-ctx.Done():
			return r, fmt.Errorf("%d of %d conversations answered after %s; %s", answered, n, scaleLimit, c.unanswered(n, chat, results))
		case <-time.After(10 * time.Millisecond):
		}
	}
	t := newTracker()
	c.mu.Lock()
	var last time.Time
	for i := range n {
		at := c.first[chat(i)]
		t.record(at.Sub(sent[i]).Microseconds(), false)
		if at.After(last) {
			last = at
		}
	}
	c.mu.Unlock()
	wg.Wait()
	r.Seconds = last.Sub(start).Seconds()
	s := t.stats(last.Sub(start), 1)
	r.P50, r.P99, r.Max = s.P50, s.P99, s.Max
	// The spawner's events trail its work under load: once every agent
	// has exited (hibernated after --idle-timeout), they are all in.
	settle := time.After(durableLimit)
settling:
	for c.running.Load() > 0 {
		select {
		case <-settle:
			log.Printf("scale: %d agents still running by the spawner's events after %s; its counts are partial", c.running.Load(), durableLimit)
			break settling
		case <-time.After(20 * time.Millisecond):
		}
	}
	r.Spawns, r.Hibernations = c.spawned.Load()-spawned0, c.hibernated.Load()-hibernated0
	r.ForCapacity, r.Wakes = c.forCapacity.Load()-capacity0, c.woken.Load()-woken0
	if r.DeadLetters, err = countDeadLetters(ctx, c.conn); err != nil {
		return r, err
	}
	if sendErrs.Load() > 0 {
		return r, fmt.Errorf("%d of %d publishes failed", sendErrs.Load(), n)
	}
	return r, nil
}

// unanswered describes the first conversation of n left unanswered: the
// bus's result for its publish.
func (c *conversations) unanswered(n int, chat func(int) string, results []*protocol.SendMessageResult) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range n {
		if _, ok := c.first[chat(i)]; !ok {
			return fmt.Sprintf("tg:%s is not, the bus's result for its publish: %+v", chat(i), results[i])
		}
	}
	return "every one is"
}

// countDeadLetters counts the bus's dead letters.
func countDeadLetters(ctx context.Context, conn *peer.Conn) (int, error) {
	count := 0
	params := protocol.DLQListParams{Limit: 1000}
	for {
		var r protocol.DLQListResult
		if err := conn.Call(ctx, protocol.MethodDLQList, params, &r); err != nil {
			return 0, fmt.Errorf("dlq.list: %w", err)
		}
		count += len(r.Entries)
		if r.NextCursor == "" {
			return count, nil
		}
		params.Cursor = r.NextCursor
	}
}

// loadAverage returns the machine's load averages over 1, 5 and 15
// minutes, as /proc/loadavg has them.
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

var awayMemoryLine = regexp.MustCompile(`^BenchmarkDurableAwayMemory\S*\s+\d+\s+.*?([\d.]+) bytes/subscription`)

// awayMemory runs the bus's in-package BenchmarkDurableAwayMemory and
// returns its bytes of heap per durable subscription of an away owner.
func (h *harness) awayMemory() (float64, error) {
	cmd := exec.Command("go", "test", "-run", "^$", "-bench", "^BenchmarkDurableAwayMemory$", "-benchtime", "1x", "-count", "1", "./bus")
	cmd.Dir = h.cfg.root
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return 0, fmt.Errorf("go test -bench BenchmarkDurableAwayMemory ./bus in %s: %w\n%s", h.cfg.root, err, out)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if m := awayMemoryLine.FindStringSubmatch(sc.Text()); m != nil {
			return strconv.ParseFloat(m[1], 64)
		}
	}
	return 0, errors.New("BenchmarkDurableAwayMemory printed no bytes/subscription:\n" + string(out))
}
