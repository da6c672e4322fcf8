package bus_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/cluster/clustertest"
	"github.com/bub-bus/bub/peer"
	"github.com/bub-bus/bub/protocol"
	"github.com/bub-bus/bub/spawner"
)

// clusterWait bounds what a cluster test waits for across nodes. A dead
// node's duties move after the node timeout plus, when it hosted
// JetStream leaders, their re-election and the watches' recovery
// (docs/CLUSTER.md measured up to 20 s on this kind of box).
const clusterWait = 30 * time.Second

// clusterOptions are the bus options of every node in these tests:
// retries fast, two attempts, holds that outlast any test, and a delivery
// timeout that leaves the spawner time to start an agent.
func clusterOptions() *bus.Options {
	o := &bus.Options{
		DeliveryTimeout: 5 * time.Second,
		MaxAttempts:     2,
		RetryBaseDelay:  20 * time.Millisecond,
		RetryDelayCap:   5 * time.Second,
		HoldLifetime:    time.Minute,
	}
	if testing.Verbose() {
		o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return o
}

// recvWithin is recv with a bound of its own, saying what it waited for.
func recvWithin[T any](t *testing.T, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("after %v: %s", d, what)
	}
	var zero T
	return zero
}

// runSpawner runs the real spawner with o, its log kept for a failed
// test, until the test ends, once it serves.
func runSpawner(t *testing.T, o *spawner.Options) {
	t.Helper()
	var log lockedLog
	o.Logger = slog.New(slog.NewTextHandler(&log, nil))
	sp, err := spawner.New(o)
	require.NoError(t, err)
	ctx, stop := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- sp.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-stopped:
			assert.NoError(t, err, "spawner Run")
		case <-time.After(clusterWait):
			t.Error("the spawner did not stop")
		}
		if t.Failed() {
			t.Logf("spawner log:\n%s", &log)
		}
	})
	require.Eventually(t, func() bool { return strings.Contains(log.String(), "spawner serving") }, clusterWait, 20*time.Millisecond,
		"the spawner never subscribed")
}

// TestCluster runs docs/PROTOCOL.md's guarantees over three bus nodes in
// one process, clients spread over them; starting a JetStream cluster
// costs seconds, so the subtests share one, each with topics and
// clientIds of its own.
func TestCluster(t *testing.T) {
	agentBin, err := bustest.EchoAgent()
	require.NoError(t, err)
	nodes := clustertest.Start(t, clusterOptions(), "a", "b", "c")
	a, b, c := nodes[0], nodes[1], nodes[2]
	processed := protocol.ProcessMessageResult{Processed: true}

	t.Run("spec example", func(t *testing.T) {
		// A on a subscribes inbound:*, then B on b inbound:critical,
		// then C on c inbound:*; the publisher is a fourth connection.
		rec := &recorder{}
		conns := map[string]*bustest.Client{}
		for _, s := range []struct {
			name, pattern string
			node          *bustest.Server
		}{{"A", "inbound:*", a}, {"B", "inbound:critical", b}, {"C", "inbound:*", c}} {
			conns[s.name] = bustest.Connect(t, s.node.URL, "spec-"+s.name, rec.answer(s.name, processed))
			conns[s.name].Subscribe(s.pattern, protocol.PolicyContinueAll)
		}
		pub := bustest.Connect(t, a.URL, "spec-pub", nil)

		r := pub.Publish("inbound:critical", "t")
		assert.ElementsMatch(t, []string{"C", "B"}, rec.called())
		require.Len(t, r.Acks, 2, "acks %+v", r.Acks)
		assert.Equal(t, "spec-C", r.Acks[0].ClientID)
		assert.Equal(t, "inbound:*", r.Acks[0].Subscription)
		assert.Equal(t, "spec-B", r.Acks[1].ClientID)
		assert.True(t, r.Acks[0].Processed && r.Acks[1].Processed, "acks %+v", r.Acks)

		rec = &recorder{}
		conns["A"].OnProcess(rec.answer("A", processed))
		conns["C"].OnProcess(rec.answer("C", processed))
		r = pub.Publish("inbound:normal", "t")
		assert.Equal(t, []string{"C"}, rec.called(), "A's inbound:* is overridden by C's")
		assert.Equal(t, []string{"spec-C"}, ackClients(r))

		// When the newer duplicate goes away, the older one counts again.
		conns["C"].MustCall(protocol.MethodUnsubscribe, protocol.UnsubscribeParams{Topic: "inbound:*"}, nil)
		r = pub.Publish("inbound:normal", "t")
		assert.Equal(t, []string{"C", "A"}, rec.called())
		assert.Equal(t, []string{"spec-A"}, ackClients(r))
	})

	t.Run("policies", func(t *testing.T) {
		// The older subscriber on a, the newer on b, the publisher on c.
		for i, tt := range policyCases() {
			t.Run(tt.name, func(t *testing.T) {
				id := func(name string) string { return fmt.Sprintf("pol%d-%s", i, name) }
				topic := fmt.Sprintf("pol%d:1", i)
				rec := &recorder{}
				bustest.Connect(t, a.URL, id("old"), rec.answer("old", processed)).
					Subscribe(fmt.Sprintf("pol%d:*", i), "")
				bustest.Connect(t, b.URL, id("new"), rec.answer("new", tt.first)).
					Subscribe(topic, tt.policy)
				r := bustest.Connect(t, c.URL, id("pub"), nil).Publish(topic, "x")
				assert.ElementsMatch(t, tt.want, rec.called())
				assert.True(t, r.Success)
				var want []string
				for _, w := range tt.want {
					want = append(want, id(w))
				}
				assert.Equal(t, want, ackClients(r))
			})
		}
	})

	t.Run("takeover", func(t *testing.T) {
		oldSeen := make(chan protocol.ProcessMessageParams, 4)
		old := bustest.Connect(t, a.URL, "tk-x", answering(oldSeen, processed))
		old.Subscribe("tk:x", "")
		newSeen := make(chan protocol.ProcessMessageParams, 4)
		fresh := bustest.Connect(t, b.URL, "tk-x", answering(newSeen, processed))
		assert.Equal(t, bus.StatusTakenOver, old.Closed(), "the connection on a, taken over from b")

		// No publish between the close and the new subscription: unlike
		// on one bus, the old subscription may still be in c's router for
		// a moment (docs/CLUSTER.md, "Identity and takeover"), and such a
		// publish fails over to a retry for tk-x instead of finding
		// nobody. Once the new one subscribed, the chain holds tk-x once,
		// at its newest subscription.
		fresh.Subscribe("tk:x", "")
		pub := bustest.Connect(t, c.URL, "tk-pub", nil)
		r := pub.Publish("tk:x", "t")
		require.True(t, r.Success)
		assert.Equal(t, []string{"tk-x"}, ackClients(r))
		assert.True(t, r.Acks[0].Processed, "ack %+v", r.Acks[0])
		assert.Equal(t, r.MessageID, recv(t, newSeen).MessageID)
		assert.Empty(t, oldSeen, "the old connection got a message after the takeover")
	})

	t.Run("fallback rehold", func(t *testing.T) {
		// A fallback on c asks to wait; a regular subscriber then appears
		// on b and gets the message, published on a.
		asked := make(chan protocol.ProcessMessageParams, 4)
		fb := bustest.Connect(t, c.URL, "fb-spawner", func(p protocol.ProcessMessageParams) any {
			asked <- p
			return protocol.ProcessMessageResult{ShouldRetry: true, RetrySeconds: 60, Message: "starting an agent"}
		})
		subscribeFallback(t, fb, "fb:*")
		pub := bustest.Connect(t, a.URL, "fb-bridge", nil)
		r := pub.Publish("fb:1", "telegram_message")
		assert.True(t, r.Success, "a message only a fallback received counts as routed")
		require.Len(t, r.Acks, 1)
		assert.Equal(t, "fb-spawner", r.Acks[0].ClientID)
		require.True(t, r.Acks[0].Retrying, "the fallback's ack says the message is kept: %+v", r.Acks[0])
		assert.Equal(t, r.MessageID, recv(t, asked).MessageID)

		delivered := make(chan protocol.ProcessMessageParams, 1)
		bustest.Connect(t, b.URL, "fb-agent", answering(delivered, processed)).Subscribe("fb:1", "")
		p := recvWithin(t, delivered, clusterWait, "the agent on b never got the message the fallback asked to wait")
		assert.Equal(t, r.MessageID, p.MessageID)
		assert.Equal(t, "fb-bridge", p.From)
		assert.Equal(t, "fb:1", p.Subscription)
		assert.Empty(t, asked, "the fallback was asked again though a subscriber had appeared")
	})

	t.Run("spawner", func(t *testing.T) {
		// The spawner on c serves chats whose messages arrive on a, its
		// agent on c as when it takes the spawner's URL list, or on b as
		// after the agent failed over (the command points it there).
		replies := make(chan *peer.Delivery, 4)
		bridge, err := peer.Dial(t.Context(), a.URL, &peer.Options{ClientID: "sp-bridge", Logger: slog.New(slog.DiscardHandler)})
		require.NoError(t, err)
		t.Cleanup(func() { bridge.Close() })
		require.NoError(t, bridge.Subscribe(t.Context(), "outbound:*", func(_ context.Context, d *peer.Delivery) (peer.Result, error) {
			replies <- d
			return peer.Result{Processed: true}, nil
		}, nil))
		for i, tt := range []struct {
			name  string
			agent *bustest.Server
		}{{"agent on its node", c}, {"agent on another node", b}} {
			t.Run(tt.name, func(t *testing.T) {
				chat := 70 + i
				pattern := fmt.Sprintf("chat%d:*", i)
				runSpawner(t, &spawner.Options{
					BusURL:        c.URL,
					ClientID:      fmt.Sprint("sp-spawner-", i),
					Patterns:      []string{pattern},
					Command:       []string{"/bin/sh", "-c", `BUB_BUS_URL="$0" exec "$1"`, tt.agent.URL, agentBin},
					WorkspaceRoot: t.TempDir(),
					SpawnTimeout:  4 * time.Second,
					StopTimeout:   2 * time.Second,
				})

				topic := fmt.Sprintf("chat%d:%d", i, chat)
				r, err := bridge.SendMessage(t.Context(), topic, map[string]any{"type": "telegram_message", "text": "hello", "chat_id": chat}, nil)
				require.NoError(t, err)
				require.Len(t, r.Acks, 1, "acks %+v", r.Acks)
				assert.Equal(t, fmt.Sprint("sp-spawner-", i), r.Acks[0].ClientID)
				require.True(t, r.Acks[0].Retrying, "the spawner asks the bus to route the message again, to its agent: %+v", r.Acks[0])

				d := recvWithin(t, replies, clusterWait, "no reply from the agent")
				var reply struct {
					Text    string `json:"text"`
					AgentID string `json:"agent_id"`
				}
				require.NoError(t, json.Unmarshal(d.Payload, &reply))
				assert.Equal(t, "echo: hello", reply.Text)
				assert.Equal(t, fmt.Sprint("outbound:", chat), d.Topic)
				assert.Equal(t, reply.AgentID, d.From)
			})
		}
	})

	t.Run("ready", func(t *testing.T) {
		// /readyz says 200 once the node's JetStream is current.
		for _, n := range nodes {
			require.Eventually(t, func() bool {
				resp, err := http.Get(n.HTTP.URL + "/readyz")
				if err != nil {
					return false
				}
				resp.Body.Close()
				return resp.StatusCode == http.StatusOK
			}, clusterWait, 100*time.Millisecond, "node at %s never ready", n.URL)
		}
	})

	t.Run("publisher order", func(t *testing.T) {
		// The publisher on a pipelines messages to subscribers on b and
		// c, which answer out of step: each still reads them in the
		// order they were sent (docs/CLUSTER.md, "Delivery").
		others := []string{b.URL, c.URL}
		checkPublisherOrder(t, 200, a.URL, func(i int) string { return others[i%2] })
	})

	t.Run("client events", func(t *testing.T) {
		events := make(chan protocol.ProcessMessageParams, 64)
		bustest.Connect(t, a.URL, "ev-watcher", answering(events, processed)).Subscribe(protocol.ClientEventsPattern, protocol.PolicyContinueAll)
		bustest.Connect(t, c.URL, "ev-c", nil).Subscribe("ev:1", "")
		for _, want := range []busEvent{{"connected", "ev-c", ""}, {"subscribed", "ev-c", "ev:1"}} {
			var p protocol.ProcessMessageParams
			var got busEvent
			for got.ClientID != "ev-c" { // the watcher hears of its own subscription too
				p, got = recv(t, events), busEvent{}
				require.NoError(t, json.Unmarshal(p.Payload, &got), "event payload %s", p.Payload)
			}
			assert.Equal(t, want, got)
			assert.Equal(t, "system:client."+want.Event, p.Topic)
			var node struct {
				Node string `json:"node"`
			}
			require.NoError(t, json.Unmarshal(p.Payload, &node))
			assert.Equal(t, "c", node.Node, "the event names the node it happened on (docs/CLUSTER.md): %s", p.Payload)
		}
	})

	t.Run("dead letters", func(t *testing.T) {
		// Accepted on a, refused by a subscriber on c until attempts run
		// out, dead-lettered by a; every node lists it.
		bustest.Connect(t, c.URL, "dl-sub", func(protocol.ProcessMessageParams) any {
			return protocol.ProcessMessageResult{ShouldRetry: true, Message: "not now"}
		}).Subscribe("dl:*", "")
		r := bustest.Connect(t, a.URL, "dl-pub", nil).Publish("dl:1", "job")
		require.Len(t, r.Acks, 1)
		require.True(t, r.Acks[0].Retrying, "ack %+v", r.Acks[0])
		for i, n := range []*bustest.Server{b, c, a} {
			asker := bustest.Connect(t, n.URL, fmt.Sprint("dl-ops-", i), nil)
			var list protocol.DLQListResult
			require.Eventually(t, func() bool {
				list = dlqList(t, asker, protocol.DLQListParams{DLQFilter: protocol.DLQFilter{Topic: "dl:1"}})
				return len(list.Entries) > 0
			}, clusterWait, 20*time.Millisecond, "dlq.list on a node never listed the dead letter")
			require.Len(t, list.Entries, 1)
			d := list.Entries[0]
			assert.Equal(t, r.MessageID, d.MessageID)
			assert.Equal(t, protocol.ReasonMaxRetries, d.Reason)
			assert.Equal(t, "dl-pub", d.From)
			assert.Equal(t, "dl-sub", d.ClientID)
			assert.Equal(t, "dl:*", d.Subscription)
			assert.Len(t, d.Attempts, 2)
		}
	})

	t.Run("reject", func(t *testing.T) {
		// Refused for good by a subscriber on b at the first attempt,
		// through the Go SDK: the answer crosses from b to a, which
		// dead-letters it at once; c reads the dead letter the ack names.
		seen := make(chan int, 4)
		subscribeAnswering(t, b.URL, "rj-sub", "rj:*", peer.Result{Reject: true, Message: "chat not found"}, seen)
		r := bustest.Connect(t, a.URL, "rj-pub", nil).Publish("rj:1", "reply")
		assert.Equal(t, 1, recv(t, seen))
		checkRejected(t, bustest.Connect(t, c.URL, "rj-ops", nil), r, "rj-sub", "chat not found")
	})
}

// TestClusterNodeDeath: a retry and a hold, both acknowledged to their
// publisher by node a, are delivered by a survivor after a crashes.
func TestClusterNodeDeath(t *testing.T) {
	opts := clusterOptions()
	// Pings more often than a subscribe right after the death waits for
	// the dead node's confirmation: the subscriber's pongs must be read
	// meanwhile, so the cluster write is off its read loop.
	opts.PingInterval = 400 * time.Millisecond
	nodes := clustertest.Start(t, opts, "a", "b", "c")
	a, b, c := nodes[0], nodes[1], nodes[2]

	// The worker on b asks for its first attempt again in 2 s: long
	// enough that a is dead before the retry is due.
	retried := make(chan protocol.ProcessMessageParams, 4)
	bustest.Connect(t, b.URL, "worker", attempts(retried,
		protocol.ProcessMessageResult{ShouldRetry: true, RetrySeconds: 2, Message: "later"},
		protocol.ProcessMessageResult{Processed: true})).Subscribe("job:*", "")
	pub := bustest.Connect(t, a.URL, "pub", nil)
	r := pub.Publish("job:1", "job")
	require.Len(t, r.Acks, 1)
	require.True(t, r.Acks[0].Retrying, "ack %+v", r.Acks[0])
	assert.Equal(t, 1, recv(t, retried).Attempt)
	held := pub.Publish("agent:late", "task_request")
	require.True(t, held.Held, "result %+v", held)

	bus.Crash(a.Server)
	died := time.Now()
	got := make(chan protocol.ProcessMessageParams, 1)
	late := bustest.Connect(t, c.URL, "late", answering(got, protocol.ProcessMessageResult{Processed: true}))
	subscribing := time.Now()
	late.Subscribe("agent:late", "")
	t.Logf("subscribe on c answered in %v, a being dead", time.Since(subscribing).Round(time.Millisecond))

	p := recvWithin(t, retried, clusterWait, "the retry a accepted was never delivered after a died")
	assert.Equal(t, r.MessageID, p.MessageID)
	assert.Equal(t, 2, p.Attempt)
	assert.Equal(t, "pub", p.From)
	t.Logf("retry delivered %v after the death", time.Since(died).Round(time.Millisecond))
	p = recvWithin(t, got, clusterWait, "the message a held was never delivered after a died")
	assert.Equal(t, held.MessageID, p.MessageID)
	assert.Equal(t, "pub", p.From)
	took := time.Since(died)
	t.Logf("hold delivered %v after the death", took.Round(time.Millisecond))
	// The subscription on c reaches the node that took the hold over
	// through a watch whose consumer may have died with a: restarted at
	// once (cluster/watch.go) it takes about 2 s; waiting for the watch
	// to notice by itself took about 20.
	assert.Less(t, took, 15*time.Second, "the takeover's watch was not restarted when a died")
	// Delivered once each: a survivor took them over, not two.
	select {
	case p := <-retried:
		t.Errorf("the retry came again: attempt %d", p.Attempt)
	case p := <-got:
		t.Errorf("the held message came again: attempt %d", p.Attempt)
	case <-time.After(time.Second):
	}
}
