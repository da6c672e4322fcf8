package bus_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/protocol"
)

// TestProtocolExamples replays every wire example of docs/PROTOCOL.md
// against a real bus over loopback and compares the bus's frames with the
// doc's, so that the two cannot drift: change a message text in the bus
// and this fails until the doc says the same.
//
// An example is a run of non-blank lines in a ``` block, each "→ frame"
// (sent by the peer) or "← frame" (sent by the bus), optionally followed
// by an annotation such as "(while draining)". Examples are grouped by the
// heading they sit under; a scenario below knows how to set up the bus for
// the examples of one or more headings (a subscriber that answers, a dead
// letter that exists, a drain in progress). An example under a heading no
// scenario knows fails the test, as does one a scenario did not replay:
// new examples are replayed or explicitly skipped, never silently left
// out.
func TestProtocolExamples(t *testing.T) {
	examples := parseProtocolDoc(t, "../docs/PROTOCOL.md")
	require.NotEmpty(t, examples, "no wire examples found in PROTOCOL.md: has their notation changed?")

	skips := make([]int, len(docSkips))
	for _, ex := range examples {
		for i, s := range docSkips {
			if ex.heading == s.heading && ex.contains(s.contains) {
				ex.skipped = s.why
				skips[i]++
			}
		}
	}
	for i, s := range docSkips {
		if skips[i] != 1 {
			t.Errorf("skip list: %q under %q matches %d examples, want exactly 1; update docSkips", s.contains, s.heading, skips[i])
		}
	}

	byHeading := map[string][]*docExample{}
	for _, ex := range examples {
		if ex.skipped == "" {
			byHeading[ex.heading] = append(byHeading[ex.heading], ex)
		}
	}
	for _, sc := range docScenarios {
		var mine []*docExample
		for _, h := range sc.headings {
			mine = append(mine, byHeading[h]...)
			delete(byHeading, h)
		}
		if len(mine) == 0 {
			t.Errorf("scenario %q: PROTOCOL.md has no example under %q any more; remove or rename the scenario", sc.name, sc.headings)
			continue
		}
		sort.Slice(mine, func(i, j int) bool { return mine[i].line() < mine[j].line() })
		t.Run(sc.name, func(t *testing.T) {
			sc.run(t, mine)
			for _, ex := range mine {
				if !ex.played {
					t.Errorf("PROTOCOL.md:%d: the scenario did not replay this example; teach it the setup it needs, or add it to docSkips with the reason:\n  %s", ex.line(), ex.lines[0].text)
				}
			}
		})
	}
	for h, exs := range byHeading {
		for _, ex := range exs {
			t.Errorf("PROTOCOL.md:%d: example under %q belongs to no scenario in docs_test.go; add one, or add the example to docSkips with the reason:\n  %s", ex.line(), h, ex.lines[0].text)
		}
	}

	var played, frames int
	for _, ex := range examples {
		if ex.played {
			played++
			frames += len(ex.lines)
		}
	}
	t.Logf("replayed %d of %d examples (%d frames); skipped %d", played, len(examples), frames, len(docSkips))
}

// docSkips are the examples that cannot be replayed against a bus alone.
// Keep the list short: every entry is a place where doc and bus may drift.
var docSkips = []struct{ heading, contains, why string }{
	{"## Error codes", `"code":-32603`,
		"a healthy bus has no request that makes it fail; an internal error needs a broken store"},
	{"## Default handler and agent spawning", `"topic":"system:agent.exited"`,
		"the spawner's own event, not the bus's: the bus only relays it, and the spawner's tests check its payload"},
}

// docScenarios set up a bus for the examples under their headings and
// replay them. A scenario fails on an example it cannot place, so that a
// new example under a known heading is not passed over.
var docScenarios = []struct {
	name     string
	headings []string
	run      func(t *testing.T, exs []*docExample)
}{
	{"conformance", []string{"## JSON-RPC conformance"}, func(t *testing.T, exs []*docExample) {
		srv := startDocBus(t, nil)
		p := newDocPeer(t, bustest.Dial(t, srv.URL))
		for _, ex := range exs {
			p.play(ex)
		}
	}},
	{"error codes", []string{"## Error codes"}, replayErrorCodes},
	// The methods' examples read as one session: ids 1 to 6 on one
	// connection, initialized as agent-1, subscribing and unsubscribing.
	{"session", []string{"### initialize", "### subscribe", "### unsubscribe", "### ping", "### Fallback subscriptions"}, func(t *testing.T, exs []*docExample) {
		srv := startDocBus(t, nil)
		p := newDocPeer(t, bustest.Dial(t, srv.URL))
		for _, ex := range exs {
			p.play(ex)
		}
	}},
	// sendMessage's examples are the publisher's side of a delivery whose
	// subscriber's side is processMessage's example: both are replayed at
	// once, on two connections.
	{"delivery", []string{"### sendMessage (peer → bus)", "### processMessage (bus → subscriber)"}, replayDelivery},
	{"lifecycle events", []string{"### Lifecycle events"}, func(t *testing.T, exs []*docExample) {
		srv := startDocBus(t, nil)
		for _, ex := range exs {
			want := ex.busRequest(t)
			if want == nil || want.Params.Topic != bus.TopicClientSubscribed {
				t.Errorf("PROTOCOL.md:%d: no setup for this example; the scenario replays subscribed events", ex.line())
				continue
			}
			observer := bustest.Dial(t, srv.URL)
			observer.Initialize("observer")
			observer.Subscribe(want.Params.Subscription, protocol.PolicyContinueAll)
			var ev struct{ ClientID, Pattern string }
			decodeInto(t, ex, want.Params.Payload, &ev)
			bustest.Connect(t, srv.URL, ev.ClientID, bustest.Processed).Subscribe(ev.Pattern, "")
			newDocPeer(t, observer).play(ex)
		}
	}},
	{"spawner", []string{"## Default handler and agent spawning"}, replaySpawner},
	{"final refusal", []string{"### Final refusal"}, func(t *testing.T, exs []*docExample) {
		srv := startDocBus(t, nil)
		for _, ex := range exs {
			// The subscriber the ack names refuses with the ack's reason.
			ack := ex.firstAck(t)
			bustest.Connect(t, srv.URL, ack.ClientID, func(protocol.ProcessMessageParams) any {
				return protocol.ProcessMessageResult{Reject: true, Message: ack.Message}
			}).Subscribe(ack.Subscription, "")
			pub := bustest.Dial(t, srv.URL)
			pub.Initialize("pub")
			newDocPeer(t, pub).play(ex)
		}
	}},
	{"retries", []string{"### Retries"}, func(t *testing.T, exs []*docExample) {
		srv := startDocBus(t, nil)
		for _, ex := range exs {
			// The subscriber the ack names answers as the ack says.
			ack := ex.firstAck(t)
			worker := bustest.Connect(t, srv.URL, ack.ClientID, func(protocol.ProcessMessageParams) any {
				return protocol.ProcessMessageResult{ShouldRetry: true, Message: ack.Message}
			})
			worker.Subscribe(ack.Subscription, "")
			pub := bustest.Dial(t, srv.URL)
			pub.Initialize("pub")
			newDocPeer(t, pub).play(ex)
		}
	}},
	{"held messages", []string{"### Held messages"}, func(t *testing.T, exs []*docExample) {
		srv := startDocBus(t, nil)
		pub := bustest.Dial(t, srv.URL)
		pub.Initialize("pub")
		p := newDocPeer(t, pub)
		for _, ex := range exs {
			p.play(ex)
		}
	}},
	{"dead-letter queue", []string{"### The dead-letter queue"}, replayDeadLetters},
	{"durable subscriptions", []string{"### Durable subscriptions"}, replayDurable},
}

// docServerID is the serverId the doc's examples show. The buses of this
// test are given it, so that the events' "from" matches as well.
const docServerID = "bub-3f2a9c1e"

func startDocBus(t *testing.T, opts *bus.Options) *bustest.Server {
	t.Helper()
	var o bus.Options
	if opts != nil {
		o = *opts
	}
	o.ServerID = docServerID
	return bustest.Start(t, &o)
}

// replayErrorCodes: each example of the error table on a connection in the
// state its annotation names.
func replayErrorCodes(t *testing.T, exs []*docExample) {
	for _, ex := range exs {
		switch note := ex.note(); note {
		case "", "before initialize":
			srv := startDocBus(t, nil)
			newDocPeer(t, bustest.Dial(t, srv.URL)).play(ex)
		case "257th at once":
			// Fill the default in-flight bound with sends a subscriber
			// holds, then replay the one too many on the same connection.
			srv := startDocBus(t, nil)
			topic := ex.sentTopic(t)
			release := make(chan struct{})
			t.Cleanup(func() { close(release) }) // before the bus shuts down
			bustest.Connect(t, srv.URL, "slow", func(protocol.ProcessMessageParams) any {
				<-release
				return protocol.ProcessMessageResult{Processed: true}
			}).Subscribe(topic, "")
			pub := bustest.Dial(t, srv.URL)
			pub.Initialize("pub")
			for i := range 256 {
				pub.Send(fmt.Sprintf(`{"jsonrpc":"2.0","method":"sendMessage","params":{"topic":%q,"payload":{"type":"t"}},"id":"fill-%d"}`, topic, i))
			}
			// ping is answered in order on the read loop: once it is, all
			// 256 sends have been taken in and are running.
			pub.MustCall(protocol.MethodPing, nil, nil)
			newDocPeer(t, pub).play(ex)
		case "while draining":
			// A delivery the subscriber holds keeps the bus draining, and
			// the connection open, while the example is replayed.
			srv := startDocBus(t, nil)
			release := make(chan struct{})
			delivered := make(chan struct{}, 1)
			bustest.Connect(t, srv.URL, "slow", func(protocol.ProcessMessageParams) any {
				delivered <- struct{}{}
				<-release
				return protocol.ProcessMessageResult{Processed: true}
			}).Subscribe("slow", "")
			pub := bustest.Dial(t, srv.URL)
			pub.Initialize("pub")
			pub.Send(`{"jsonrpc":"2.0","method":"sendMessage","params":{"topic":"slow","payload":{"type":"t"}},"id":"hold"}`)
			<-delivered
			shut := make(chan error, 1)
			go func() { shut <- srv.Shutdown(context.Background()) }()
			require.Eventually(t, func() bool {
				resp, err := srv.HTTP.Client().Get(srv.HTTP.URL + "/readyz")
				if err != nil {
					return false
				}
				resp.Body.Close()
				return resp.StatusCode == 503
			}, bustest.Timeout, 10*time.Millisecond, "the bus never started draining")
			newDocPeer(t, pub).play(ex)
			close(release)
			require.NoError(t, <-shut)
		case "1001st subscription":
			srv := startDocBus(t, nil)
			c := bustest.Dial(t, srv.URL)
			c.Initialize("many")
			for i := range 1000 {
				c.Send(fmt.Sprintf(`{"jsonrpc":"2.0","method":"subscribe","params":{"topic":"s-%d"},"id":"fill-%d"}`, i, i))
			}
			for range 1000 {
				c.Recv()
			}
			newDocPeer(t, c).play(ex)
		case "beyond --publish-rate":
			// One publish a minute: the first takes the bucket's only
			// token, so the example, right after it, is refused.
			srv := startDocBus(t, &bus.Options{Limits: bus.Limits{PublishRate: 1.0 / 60, PublishBurst: 1}})
			c := bustest.Dial(t, srv.URL)
			c.Initialize("fast")
			c.MustCall(protocol.MethodSendMessage, map[string]any{"topic": ex.sentTopic(t), "payload": map[string]any{"type": "t"}}, nil)
			newDocPeer(t, c).play(ex)
		default:
			t.Errorf("PROTOCOL.md:%d: no setup for the annotation (%s); teach replayErrorCodes", ex.line(), note)
		}
	}
}

// replayDelivery replays each sendMessage example on a publisher, agent-1;
// one whose topic is the processMessage example's is delivered to a raw
// subscriber that plays that example's side.
func replayDelivery(t *testing.T, exs []*docExample) {
	var delivery *docExample
	var sends []*docExample
	for _, ex := range exs {
		if ex.heading == "### processMessage (bus → subscriber)" {
			if delivery != nil {
				t.Errorf("PROTOCOL.md:%d: a second processMessage example; the scenario knows one delivery", ex.line())
				continue
			}
			delivery = ex
		} else {
			sends = append(sends, ex)
		}
	}
	srv := startDocBus(t, nil)
	var deliveredTopic string
	var sub *docPeer
	if delivery != nil {
		call := delivery.busRequest(t)
		deliveredTopic = call.Params.Topic
		// The subscriber is the one the sendMessage example's ack names.
		c := bustest.Dial(t, srv.URL)
		c.Initialize("analyzer")
		c.Subscribe(call.Params.Subscription, "")
		sub = newDocPeer(t, c)
	}
	pubConn := bustest.Dial(t, srv.URL)
	pubConn.Initialize("agent-1")
	pub := newDocPeer(t, pubConn)
	for _, ex := range sends {
		if sub == nil || ex.sentTopic(t) != deliveredTopic {
			pub.play(ex)
			continue
		}
		if len(ex.lines) != 2 || !ex.lines[0].sent || ex.lines[1].sent {
			t.Errorf("PROTOCOL.md:%d: want one → and one ←", ex.line())
			continue
		}
		pub.send(ex.lines[0])
		sub.play(delivery)
		pub.expect(ex.lines[1])
		ex.played = true
	}
}

// replaySpawner plays the spawner's side of a spawn on a raw connection:
// the bus delivers the message to its fallback, an "agent" subscribes, the
// bus reports it, and the spawner's answer routes the message again.
func replaySpawner(t *testing.T, exs []*docExample) {
	srv := startDocBus(t, nil)
	for _, ex := range exs {
		var calls []docLine
		for _, ln := range ex.lines {
			if !ln.sent {
				calls = append(calls, ln)
			}
		}
		if len(calls) != 2 {
			t.Errorf("PROTOCOL.md:%d: no setup for this example; the scenario knows the spawn exchange (two deliveries, then the answers)", ex.line())
			continue
		}
		msg := calls[0].busRequest(t)
		subscribed := calls[1].busRequest(t)
		var ev struct{ ClientID, Pattern string }
		decodeInto(t, ex, subscribed.Params.Payload, &ev)

		delivered := make(chan protocol.ProcessMessageParams, 1)
		c := bustest.Dial(t, srv.URL)
		c.Initialize("spawner")
		c.Subscribe(subscribed.Params.Subscription, protocol.PolicyContinueAll)
		c.MustCall(protocol.MethodSubscribe, protocol.SubscribeParams{Topic: msg.Params.Subscription, Fallback: true}, nil)
		spawner := newDocPeer(t, c)

		cli := bustest.Dial(t, srv.URL)
		cli.Initialize(msg.Params.From)
		send, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "sendMessage", "id": "cli-1",
			"params": map[string]any{"topic": msg.Params.Topic, "payload": msg.Params.Payload}})
		require.NoError(t, err)
		cli.Send(string(send))

		for _, ln := range ex.lines {
			if ln.sent {
				spawner.send(ln)
				continue
			}
			spawner.expect(ln)
			if ln.line == calls[0].line {
				// What the spawner's agent does once started.
				bustest.Connect(t, srv.URL, ev.ClientID, func(d protocol.ProcessMessageParams) any {
					delivered <- d
					return protocol.ProcessMessageResult{Processed: true}
				}).Subscribe(ev.Pattern, "")
			}
		}
		ex.played = true
		// Routed again, the message reaches the agent, as the spawner's
		// answer asked.
		select {
		case d := <-delivered:
			require.Equal(t, msg.Params.From, d.From)
		case <-time.After(bustest.Timeout):
			t.Errorf("PROTOCOL.md:%d: the message never reached %s after the spawner's answer", ex.line(), ev.ClientID)
		}
	}
}

// replayDeadLetters: the dead_lettered event from a real dead-lettering,
// and the dlq.* calls against a queue that holds the doc's entries.
func replayDeadLetters(t *testing.T, exs []*docExample) {
	var ops *docPeer
	for _, ex := range exs {
		switch m := ex.method(); {
		case m == protocol.MethodProcessMessage:
			replayDeadLetteredEvent(t, ex)
		case strings.HasPrefix(m, "dlq."):
			if ops == nil {
				ops = newDocPeer(t, deadLetterQueue(t))
			}
			ops.play(ex)
		default:
			t.Errorf("PROTOCOL.md:%d: no setup for %q; teach replayDeadLetters", ex.line(), m)
		}
	}
}

// deadLetterQueue starts a bus whose queue holds what the dlq.* examples
// name, in this order: three no_subscribers entries (the three dlq.purge
// removes) and three rejected ones, so that the next is d-7; d-7 on jobs:7
// as dlq.list shows it; d-8 on a topic nobody subscribes to (dlq.replay
// leaves it); d-9 on jobs:9 (dlq.list's next_cursor). The worker that
// takes d-7's replay answers processed: true. It returns an initialized
// connection to replay the calls on.
func deadLetterQueue(t *testing.T) *bustest.Client {
	srv := startDocBus(t, nil)
	at := time.Date(2026, 11, 21, 20, 30, 0, 500_000_000, time.UTC)
	add := func(d store.DeadLetter) {
		t.Helper()
		if d.Message.From == "" {
			d.Message.From = "pub"
		}
		d.Message.PublishedAt = at
		d.DeadAt = at.Add(5 * time.Second)
		_, err := srv.Store.DeadLetter("", &d)
		require.NoError(t, err)
	}
	for i := 1; i <= 6; i++ {
		reason := protocol.ReasonNoSubscribers
		if i > 3 {
			reason = protocol.ReasonRejected
		}
		add(store.DeadLetter{Reason: reason, Message: store.Message{ID: fmt.Sprintf("f-%d", i), Topic: fmt.Sprintf("tg:%d", i), Payload: json.RawMessage(`{"type":"t"}`)}})
	}
	add(store.DeadLetter{
		Message:  store.Message{ID: "6c1f0e9a2b3d-3", Topic: "jobs:7", Payload: json.RawMessage(`{"type":"job","n":7}`)},
		ClientID: "worker", Subscription: "jobs:*", Reason: protocol.ReasonMaxRetries,
		Attempts: []store.Attempt{{At: at, Error: "should_retry: busy"}, {At: at.Add(5 * time.Second), Error: "timeout: no answer within 30s"}},
	})
	add(store.DeadLetter{Message: store.Message{ID: "6c1f0e9a2b3d-5", Topic: "tasks:8", Payload: json.RawMessage(`{"type":"task"}`)},
		ClientID: "tasker", Subscription: "tasks:*", Reason: protocol.ReasonMaxRetries})
	add(store.DeadLetter{Message: store.Message{ID: "6c1f0e9a2b3d-6", Topic: "jobs:9", Payload: json.RawMessage(`{"type":"job","n":9}`)},
		ClientID: "worker", Subscription: "jobs:*", Reason: protocol.ReasonMaxRetries})

	bustest.Connect(t, srv.URL, "worker", func(protocol.ProcessMessageParams) any {
		return protocol.ProcessMessageResult{Processed: true}
	}).Subscribe("jobs:*", "")
	c := bustest.Dial(t, srv.URL)
	c.Initialize("ops")
	return c
}

// replayDeadLetteredEvent dead-letters a message for real, after as many
// fillers as make its id the doc's, and plays the event's subscriber.
func replayDeadLetteredEvent(t *testing.T, ex *docExample) {
	call := ex.busRequest(t)
	var ev struct {
		ID, Topic, ClientID, Subscription, Reason string
		Attempts                                  int
	}
	decodeInto(t, ex, call.Params.Payload, &ev)
	seq, err := strconv.Atoi(strings.TrimLeft(strings.TrimPrefix(ev.ID, "d-"), "0"))
	require.NoError(t, err, "PROTOCOL.md:%d: dead letter id %q", ex.line(), ev.ID)

	srv := startDocBus(t, &bus.Options{MaxAttempts: ev.Attempts, RetryBaseDelay: time.Millisecond, RetryDelayCap: 10 * time.Millisecond})
	for i := 1; i < seq; i++ {
		_, err := srv.Store.DeadLetter("", &store.DeadLetter{Reason: protocol.ReasonNoSubscribers,
			Message: store.Message{ID: fmt.Sprintf("f-%d", i), Topic: "tg:filler", Payload: json.RawMessage(`{"type":"t"}`)}})
		require.NoError(t, err)
	}
	observer := bustest.Dial(t, srv.URL)
	observer.Initialize("observer")
	observer.Subscribe(call.Params.Subscription, protocol.PolicyContinueAll)
	bustest.Connect(t, srv.URL, ev.ClientID, func(protocol.ProcessMessageParams) any {
		return protocol.ProcessMessageResult{ShouldRetry: true, Message: "busy"}
	}).Subscribe(ev.Subscription, "")
	pub := bustest.Dial(t, srv.URL)
	pub.Initialize("pub")
	pub.Send(fmt.Sprintf(`{"jsonrpc":"2.0","method":"sendMessage","params":{"topic":%q,"payload":{"type":"job"}},"id":1}`, ev.Topic))
	newDocPeer(t, observer).play(ex)
}

// A docExample is a run of non-blank lines in a ``` block of the doc.
type docExample struct {
	heading string
	lines   []docLine
	played  bool
	skipped string // why, when it is in docSkips
}

// A docLine is one frame of an example.
type docLine struct {
	line int    // in PROTOCOL.md, from 1
	sent bool   // → : sent by the peer; ← : sent by the bus
	text string // the whole line, for messages
	json string // the frame as written
	note string // the annotation after it, without parentheses
}

func (e *docExample) line() int { return e.lines[0].line }

func (e *docExample) note() string {
	for _, ln := range e.lines {
		if ln.note != "" {
			return ln.note
		}
	}
	return ""
}

func (e *docExample) contains(s string) bool {
	return slices.ContainsFunc(e.lines, func(ln docLine) bool { return strings.Contains(ln.json, s) })
}

// method is the method of the example's first request: the first →
// line's, or the first ← line's when the bus makes the call.
func (e *docExample) method() string {
	var head struct{ Method string }
	_ = json.Unmarshal([]byte(e.lines[0].json), &head)
	return head.Method
}

// sentTopic is params.topic of the example's first → line.
func (e *docExample) sentTopic(t *testing.T) string {
	for _, ln := range e.lines {
		if ln.sent {
			var req struct{ Params struct{ Topic string } }
			if err := json.Unmarshal([]byte(ln.json), &req); err != nil {
				t.Fatalf("PROTOCOL.md:%d: %v", ln.line, err)
			}
			return req.Params.Topic
		}
	}
	t.Fatalf("PROTOCOL.md:%d: the example sends nothing", e.line())
	return ""
}

// busRequest is the example's first ← processMessage call, or nil.
func (e *docExample) busRequest(t *testing.T) *docCall {
	for _, ln := range e.lines {
		if !ln.sent && strings.Contains(ln.json, `"method":"processMessage"`) {
			return ln.busRequest(t)
		}
	}
	return nil
}

// firstAck is the first ack of the example's sendMessage result.
func (e *docExample) firstAck(t *testing.T) protocol.Ack {
	for _, ln := range e.lines {
		var r struct{ Result protocol.SendMessageResult }
		if !ln.sent && json.Unmarshal([]byte(ln.json), &r) == nil && len(r.Result.Acks) > 0 {
			return r.Result.Acks[0]
		}
	}
	t.Fatalf("PROTOCOL.md:%d: no ack in the example", e.line())
	return protocol.Ack{}
}

type docCall struct {
	Params struct {
		Topic, Subscription, From string
		Payload                   json.RawMessage
	}
}

func (ln docLine) busRequest(t *testing.T) *docCall {
	var c docCall
	if err := json.Unmarshal([]byte(ln.json), &c); err != nil {
		t.Fatalf("PROTOCOL.md:%d: %v", ln.line, err)
	}
	return &c
}

// decodeInto decodes a doc payload, client_id as ClientID and the like.
func decodeInto(t *testing.T, ex *docExample, data json.RawMessage, v any) {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("PROTOCOL.md:%d: %v", ex.line(), err)
	}
	camel := map[string]any{}
	for k, val := range m {
		camel[strings.ReplaceAll(k, "_", "")] = val
	}
	b, _ := json.Marshal(camel)
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("PROTOCOL.md:%d: %v", ex.line(), err)
	}
}

// docNote splits an annotation, "(while draining)", from the frame before
// it. A frame never ends in ")", so what does is an annotation.
var docNote = regexp.MustCompile(`^(.*?)\s+\(([^()]*)\)\s*$`)

// parseProtocolDoc reads the examples of the doc at path.
func parseProtocolDoc(t *testing.T, path string) []*docExample {
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var (
		examples []*docExample
		heading  string
		inBlock  bool
		cur      *docExample
	)
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		text := sc.Text()
		trimmed := strings.TrimSpace(text)
		switch {
		case strings.HasPrefix(trimmed, "```"):
			inBlock = !inBlock
			cur = nil
		case !inBlock:
			if strings.HasPrefix(text, "#") {
				heading = text
			}
		case trimmed == "":
			cur = nil
		case strings.HasPrefix(text, "→ "), strings.HasPrefix(text, "← "):
			ln := docLine{line: n, sent: strings.HasPrefix(text, "→"), text: text}
			ln.json = strings.TrimSpace(text[len("→ "):])
			if m := docNote.FindStringSubmatch(ln.json); m != nil {
				ln.json, ln.note = strings.TrimSpace(m[1]), m[2]
			}
			if cur == nil {
				cur = &docExample{heading: heading}
				examples = append(examples, cur)
			}
			cur.lines = append(cur.lines, ln)
		default:
			// Prose inside an example, "(the spawner starts …)": the
			// scenario acts it out.
		}
	}
	require.NoError(t, sc.Err())
	return examples
}

// docPeer plays the doc's peer on one raw connection.
type docPeer struct {
	t *testing.T
	c *bustest.Client
	// ids maps the id the doc shows on a call the bus made to the id the
	// bus used, so that the peer's → answer reaches the right call.
	ids map[string]json.RawMessage
	// unanswered are the bus's calls no → line answered yet.
	unanswered map[string]bool
}

func newDocPeer(t *testing.T, c *bustest.Client) *docPeer {
	p := &docPeer{t: t, c: c, ids: map[string]json.RawMessage{}, unanswered: map[string]bool{}}
	// Calls the example left unanswered are answered, so no delivery
	// waits out its timeout while the bus shuts down.
	t.Cleanup(func() {
		for id := range p.unanswered {
			_ = p.c.WS.Write(context.Background(), websocket.MessageText, fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%s,"result":{"processed":true}}`, id))
		}
	})
	return p
}

// play replays every line of ex in order.
func (p *docPeer) play(ex *docExample) {
	ex.played = true
	if first := ex.lines[0]; !first.sent && !strings.Contains(first.json, `"method":`) {
		p.t.Errorf("PROTOCOL.md:%d: a response with no request before it; show the → line that asks for it:\n  %s", first.line, first.text)
		return
	}
	for _, ln := range ex.lines {
		if ln.sent {
			p.send(ln)
		} else if !p.expect(ln) {
			break
		}
	}
}

// send writes the → line as the doc has it, byte for byte, except for the
// id of an answer to a call of the bus.
func (p *docPeer) send(ln docLine) {
	frame := ln.json
	var head struct {
		ID     json.RawMessage `json:"id"`
		Method *string         `json:"method"`
	}
	if json.Unmarshal([]byte(frame), &head) == nil && head.Method == nil && head.ID != nil {
		if real, ok := p.ids[string(head.ID)]; ok {
			frame = strings.Replace(frame, `"id":`+string(head.ID), `"id":`+string(real), 1)
			delete(p.unanswered, string(real))
		}
	}
	p.c.Send(frame)
}

// expect reads the bus's next frame and compares it with the ← line. Bus
// events (processMessage of a system: topic) that are not the one
// expected are answered processed: false and passed over, as a peer
// subscribed to system topics hears of every connection and
// subscription. It reports false when the frame did not match.
func (p *docPeer) expect(ln docLine) bool {
	t := p.t
	t.Helper()
	want, err := decodeDocJSON(ln.json)
	if err != nil {
		t.Errorf("PROTOCOL.md:%d: the example is not JSON (%v):\n  %s", ln.line, err, ln.text)
		return false
	}
	wantCall, _ := want.(map[string]any)
	var passed []string
	for {
		frame, err := p.c.RecvWithin(bustest.Timeout)
		if err != nil {
			t.Errorf("PROTOCOL.md:%d: the bus sent nothing matching: %v\n  doc: %s\n  passed over: %s", ln.line, err, ln.json, strings.Join(passed, "\n    "))
			return false
		}
		got, err := decodeDocJSON(string(frame))
		if err != nil {
			t.Errorf("PROTOCOL.md:%d: the bus sent a frame that is not JSON: %s", ln.line, frame)
			return false
		}
		gotCall, _ := got.(map[string]any)
		if isBusEvent(gotCall) && !sameEvent(wantCall, gotCall) {
			passed = append(passed, string(frame))
			_ = p.c.WS.Write(context.Background(), websocket.MessageText, fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%s,"result":{"processed":false}}`, rawID(gotCall)))
			continue
		}
		isCall := wantCall != nil && wantCall["method"] != nil
		if isCall {
			// The bus numbers its own calls: the id's shape counts, and
			// the doc's id stands for the bus's from here on.
			if gotCall == nil || gotCall["id"] == nil {
				t.Errorf("PROTOCOL.md:%d: want a call from the bus, got %s", ln.line, frame)
				return false
			}
			id := rawID(gotCall)
			p.ids[string(rawID(wantCall))] = id
			p.unanswered[string(id)] = true
			wantCall["id"], gotCall["id"] = nil, nil
		}
		if diffs := diffDocJSON("", want, got); len(diffs) > 0 {
			t.Errorf("PROTOCOL.md:%d: the bus does not send what the doc shows:\n  %s\n  doc: %s\n  bus: %s", ln.line, strings.Join(diffs, "\n  "), ln.json, frame)
			return false
		}
		return true
	}
}

func isBusEvent(call map[string]any) bool {
	if call == nil || call["method"] != protocol.MethodProcessMessage {
		return false
	}
	params, _ := call["params"].(map[string]any)
	topic, _ := params["topic"].(string)
	return strings.HasPrefix(topic, "system:")
}

// sameEvent reports whether two bus events are the same happening: the
// same topic about the same client. Their other fields are compared.
func sameEvent(want, got map[string]any) bool {
	if !isBusEvent(want) {
		return false
	}
	wp, gp := want["params"].(map[string]any), got["params"].(map[string]any)
	if wp["topic"] != gp["topic"] {
		return false
	}
	wpay, _ := wp["payload"].(map[string]any)
	gpay, _ := gp["payload"].(map[string]any)
	return wpay != nil && gpay != nil && wpay["client_id"] == gpay["client_id"]
}

func rawID(call map[string]any) json.RawMessage {
	b, _ := json.Marshal(call["id"])
	return b
}

// docEllipsis is the doc's "...": in an object, `{"serverId":"x",...}`, it
// stands for more members the example leaves out.
var docEllipsis = regexp.MustCompile(`([{,])\s*\.\.\.\s*}`)

// wildcardKey is what an object's "..." becomes once decoded.
const wildcardKey = "…"

// decodeDocJSON decodes a frame, numbers kept as written.
func decodeDocJSON(s string) (any, error) {
	s = docEllipsis.ReplaceAllString(s, `$1"`+wildcardKey+`":true}`)
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if d.More() {
		return nil, fmt.Errorf("more than one JSON value")
	}
	return v, nil
}

// volatileKeys are the members whose values differ from run to run; only
// their shape is compared, with the check given.
var volatileKeys = map[string]func(any) bool{
	"messageId":      nonEmptyString,
	"timestamp":      isTime,
	"next_attempt":   isTime,
	"published_at":   isTime,
	"first_attempt":  isTime,
	"last_attempt":   isTime,
	"dead_at":        isTime,
	"at":             isTime,
	"version":        nonEmptyString, // serverInfo.version: the build's
	"retry_after_ms": isPositive,
}

func isPositive(v any) bool {
	n, err := strconv.ParseFloat(fmt.Sprint(v), 64)
	return err == nil && n > 0
}

func nonEmptyString(v any) bool { s, ok := v.(string); return ok && s != "" }

func isTime(v any) bool {
	s, ok := v.(string)
	if !ok {
		return false
	}
	_, err := time.Parse(time.RFC3339Nano, s)
	return err == nil
}

// diffDocJSON compares the doc's value with the bus's. Objects must have
// the same members (unless the doc's has "..."); arrays the same elements
// in order, except that a batch's responses may come in any order; a doc
// string ending in "..." is a prefix; volatile members are compared by
// shape.
func diffDocJSON(path string, want, got any) []string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: doc has an object, bus sends %s", orRoot(path), show(got))}
		}
		var diffs []string
		keys := slices.Sorted(func(yield func(string) bool) {
			for k := range w {
				if !yield(k) {
					return
				}
			}
		})
		for _, k := range keys {
			if k == wildcardKey {
				continue
			}
			gv, present := g[k]
			switch check := volatileKeys[k]; {
			case !present:
				diffs = append(diffs, fmt.Sprintf("%s.%s: the bus does not send it (doc: %s)", path, k, show(w[k])))
			case check != nil:
				if !check(gv) {
					diffs = append(diffs, fmt.Sprintf("%s.%s: %s is not the shape of the doc's %s", path, k, show(gv), show(w[k])))
				}
			default:
				diffs = append(diffs, diffDocJSON(path+"."+k, w[k], gv)...)
			}
		}
		if _, open := w[wildcardKey]; !open {
			for k, gv := range g {
				if _, ok := w[k]; !ok {
					diffs = append(diffs, fmt.Sprintf("%s.%s: the bus sends %s, the doc does not show it", path, k, show(gv)))
				}
			}
		}
		return diffs
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return []string{fmt.Sprintf("%s: doc has %d elements, bus sends %s", orRoot(path), len(w), show(got))}
		}
		if path == "" {
			return diffBatch(w, g)
		}
		var diffs []string
		for i := range w {
			diffs = append(diffs, diffDocJSON(fmt.Sprintf("%s[%d]", path, i), w[i], g[i])...)
		}
		return diffs
	case string:
		if g, ok := got.(string); ok && (g == w || strings.HasSuffix(w, "...") && strings.HasPrefix(g, strings.TrimSuffix(w, "..."))) {
			return nil
		}
	default:
		if fmt.Sprint(want) == fmt.Sprint(got) && fmt.Sprintf("%T", want) == fmt.Sprintf("%T", got) {
			return nil
		}
	}
	return []string{fmt.Sprintf("%s: doc %s, bus %s", orRoot(path), show(want), show(got))}
}

// diffBatch matches a batch's responses in any order, as JSON-RPC allows.
func diffBatch(want, got []any) []string {
	used := make([]bool, len(got))
	var diffs []string
next:
	for i, w := range want {
		for j, g := range got {
			if !used[j] && len(diffDocJSON(fmt.Sprintf("[%d]", i), w, g)) == 0 {
				used[j] = true
				continue next
			}
		}
		diffs = append(diffs, fmt.Sprintf("[%d]: no response of the batch matches %s", i, show(w)))
	}
	return diffs
}

func orRoot(path string) string {
	if path == "" {
		return "(frame)"
	}
	return path
}

func show(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
