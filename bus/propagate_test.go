package bus_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/protocol"
)

// recorder answers deliveries with a fixed result and records who was
// called, in order.
type recorder struct {
	mu    sync.Mutex
	calls []string
}

func (r *recorder) answer(name string, result any) bustest.ProcessFunc {
	return func(protocol.ProcessMessageParams) any {
		r.mu.Lock()
		r.calls = append(r.calls, name)
		r.mu.Unlock()
		return result
	}
}

func (r *recorder) called() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.calls...)
}

// TestSpecExample runs the spec's Topic Matching Policy example over
// real connections.
func TestSpecExample(t *testing.T) {
	srv := bustest.Start(t, &bus.Options{DefaultPolicy: protocol.PolicyContinueAll})
	rec := &recorder{}
	for _, s := range []struct{ name, pattern string }{{"A", "inbound:*"}, {"B", "inbound:critical"}, {"C", "inbound:*"}} {
		c := bustest.Connect(t, srv.URL, s.name, rec.answer(s.name, protocol.ProcessMessageResult{Processed: true}))
		c.Subscribe(s.pattern, "")
	}
	pub := bustest.Connect(t, srv.URL, "pub", nil)

	r := pub.Publish("inbound:critical", "t")
	// Under continueAll, C and B are invoked together; the chain order
	// is the acks'.
	assert.ElementsMatch(t, []string{"C", "B"}, rec.called())
	require.Len(t, r.Acks, 2)
	assert.Equal(t, "C", r.Acks[0].ClientID)
	assert.Equal(t, "inbound:*", r.Acks[0].Subscription)
	assert.Equal(t, "B", r.Acks[1].ClientID)

	rec.calls = nil
	pub.Publish("inbound:normal", "t")
	assert.Equal(t, []string{"C"}, rec.called())
}

// policyCase is one policy's outcome: "old" subscribes t:* and answers
// processed, then "new" subscribes t:1 under policy and answers first;
// want is who is called, which is also the acks' order.
type policyCase struct {
	name   string
	policy protocol.Policy
	first  any // the newest subscriber's answer
	want   []string
}

// policyCases are every policy's outcomes, run on one bus by TestPolicies
// and across nodes by TestCluster.
func policyCases() []policyCase {
	processed := protocol.ProcessMessageResult{Processed: true}
	notProcessed := protocol.ProcessMessageResult{}
	stop := protocol.ProcessMessageResult{StopPropagation: true}
	baseSuccess := map[string]any{"success": true, "stopPropagation": false}
	return []policyCase{
		{"onProcessed stops on processed", protocol.PolicyStopOnProcessed, processed, []string{"new"}},
		{"onProcessed stops on base success", protocol.PolicyStopOnProcessed, baseSuccess, []string{"new"}},
		{"onProcessed stops on stopPropagation", protocol.PolicyStopOnProcessed, stop, []string{"new"}},
		{"onProcessed goes on when not processed", protocol.PolicyStopOnProcessed, notProcessed, []string{"new", "old"}},
		{"onProcessed goes on after an error", protocol.PolicyStopOnProcessed, &protocol.Error{Code: -1, Message: "boom"}, []string{"new", "old"}},
		{"onStop goes on when processed", protocol.PolicyStopOnStop, processed, []string{"new", "old"}},
		{"onStop stops on stopPropagation", protocol.PolicyStopOnStop, stop, []string{"new"}},
		{"continueAll ignores stopPropagation", protocol.PolicyContinueAll, protocol.ProcessMessageResult{Processed: true, StopPropagation: true}, []string{"new", "old"}},
	}
}

func TestPolicies(t *testing.T) {
	for _, tt := range policyCases() {
		t.Run(tt.name, func(t *testing.T) {
			srv := bustest.Start(t, nil)
			rec := &recorder{}
			old := bustest.Connect(t, srv.URL, "old", rec.answer("old", protocol.ProcessMessageResult{Processed: true}))
			old.Subscribe("t:*", "")
			newer := bustest.Connect(t, srv.URL, "new", rec.answer("new", tt.first))
			newer.Subscribe("t:1", tt.policy)
			r := bustest.Connect(t, srv.URL, "pub", nil).Publish("t:1", "x")
			// A continueAll subscriber and the next are invoked
			// together: the acks keep the chain order.
			assert.ElementsMatch(t, tt.want, rec.called())
			assert.True(t, r.Success)
			assert.Equal(t, tt.want, ackClients(r))
		})
	}
}

func TestDefaultPolicyFromOptions(t *testing.T) {
	srv := bustest.Start(t, &bus.Options{DefaultPolicy: protocol.PolicyContinueAll})
	rec := &recorder{}
	for _, name := range []string{"a", "b"} {
		bustest.Connect(t, srv.URL, name, rec.answer(name, protocol.ProcessMessageResult{Processed: true})).Subscribe("t:"+name, "")
	}
	bustest.Connect(t, srv.URL, "c", rec.answer("c", protocol.ProcessMessageResult{Processed: true})).Subscribe("t:*", "")
	r := bustest.Connect(t, srv.URL, "pub", nil).Publish("t:a", "x")
	assert.ElementsMatch(t, []string{"c", "a"}, rec.called())
	assert.Equal(t, []string{"c", "a"}, ackClients(r))
}

// ackClients lists the clients of r's acks, in order.
func ackClients(r protocol.SendMessageResult) []string {
	var ids []string
	for _, a := range r.Acks {
		ids = append(ids, a.ClientID)
	}
	return ids
}

func TestAckAndDeliveryFields(t *testing.T) {
	srv := bustest.Start(t, nil)
	got := make(chan protocol.ProcessMessageParams, 1)
	sub := bustest.Connect(t, srv.URL, "sub", func(p protocol.ProcessMessageParams) any {
		got <- p
		return protocol.ProcessMessageResult{Processed: true, Message: "done", ShouldRetry: false}
	})
	sub.Subscribe("agent:sub", "")
	pub := bustest.Connect(t, srv.URL, "the-publisher", nil)
	var r protocol.SendMessageResult
	pub.MustCall("sendMessage", map[string]any{
		"topic":   "agent:sub",
		"payload": map[string]any{"type": "task_request", "from": "forged", "n": 1},
		"meta":    map[string]any{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tracestate": "a=1"},
	}, &r)
	p := <-got
	assert.Equal(t, "agent:sub", p.Topic)
	assert.Equal(t, "agent:sub", p.Subscription)
	assert.Equal(t, "the-publisher", p.From, "from is the publisher's clientId, never the payload's")
	assert.Equal(t, 1, p.Attempt)
	assert.Equal(t, r.MessageID, p.MessageID)
	assert.JSONEq(t, `{"type":"task_request","from":"forged","n":1}`, string(p.Payload))
	assert.JSONEq(t, `{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","tracestate":"a=1"}`, string(p.Meta))
	assert.True(t, r.Success)
	assert.Equal(t, []protocol.Ack{{ClientID: "sub", Subscription: "agent:sub", Processed: true, Message: "done"}}, r.Acks)
}

func TestNoSubscribers(t *testing.T) {
	srv := bustest.Start(t, nil)
	r := bustest.Connect(t, srv.URL, "pub", nil).Publish("nobody:here", "t")
	assert.False(t, r.Success)
	assert.Empty(t, r.Acks)
	assert.NotNil(t, r.Acks, "acks is an empty list, not null")
	assert.Equal(t, protocol.ReasonNoSubscribers, r.Reason)
	assert.NotEmpty(t, r.MessageID)
}

func TestFailedDeliveries(t *testing.T) {
	tests := []struct {
		name    string
		answer  bustest.ProcessFunc
		drop    bool // close the subscriber's socket on delivery
		inError string
	}{
		{"timeout", nil, false, "timeout"}, // a subscriber slower than the delivery timeout
		{"error response", func(protocol.ProcessMessageParams) any { return &protocol.Error{Code: -32000, Message: "kaput"} }, false, "kaput"},
		{"result not an object", func(protocol.ProcessMessageParams) any { return "yes" }, false, "bad_result"},
		{"result member of the wrong type", func(protocol.ProcessMessageParams) any { return map[string]any{"processed": "yes"} }, false,
			"bad_result: processMessage result: json: cannot unmarshal string into Go struct field ProcessMessageResult.processed of type bool"},
		{"disconnect", nil, true, "disconnected"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := bustest.Start(t, &bus.Options{DeliveryTimeout: 300 * time.Millisecond})
			var sub *bustest.Client
			answer := tt.answer
			late, gaveUp := slowerThanTimeout(t)
			switch {
			case tt.drop:
				answer = func(protocol.ProcessMessageParams) any { _ = sub.WS.CloseNow(); return nil }
			case answer == nil:
				answer = func(protocol.ProcessMessageParams) any { late(); return nil }
			}
			sub = bustest.Connect(t, srv.URL, "sub", answer)
			sub.Subscribe("t", "")
			rec := &recorder{}
			bustest.Connect(t, srv.URL, "older", rec.answer("older", protocol.ProcessMessageResult{Processed: true})).Subscribe("t*", "")
			// "sub" is the newest match for "t" again, under a new pattern.
			sub.Subscribe("[t]", "")
			r := bustest.Connect(t, srv.URL, "pub", nil).Publish("t", "x")
			gaveUp()
			require.True(t, r.Success)
			require.Len(t, r.Acks, 2, "a failed delivery does not stop propagation")
			assert.Equal(t, "sub", r.Acks[0].ClientID)
			assert.Contains(t, r.Acks[0].Error, tt.inError)
			assert.False(t, r.Acks[0].Processed)
			assert.Equal(t, []string{"older"}, rec.called())
		})
	}
}

// TestNestedSends: a subscriber that publishes while handling a delivery
// must get its own deliveries and result; nothing runs on a read loop.
func TestNestedSends(t *testing.T) {
	for _, ring := range [][]string{{"A", "B"}, {"A", "B", "C"}} {
		t.Run(fmt.Sprint(len(ring)), func(t *testing.T) {
			srv := bustest.Start(t, nil)
			clients := map[string]*bustest.Client{}
			var hops atomic.Int32
			for i, name := range ring {
				next := ring[(i+1)%len(ring)]
				c := bustest.Dial(t, srv.URL)
				clients[name] = c
				c.OnProcess(func(p protocol.ProcessMessageParams) any {
					var body struct{ Hops int }
					_ = json.Unmarshal(p.Payload, &body)
					hops.Add(1)
					if body.Hops < len(ring) {
						r := c.Call("sendMessage", map[string]any{"topic": "ring:" + next, "payload": map[string]any{"type": "hop", "hops": body.Hops + 1}})
						if r.Error != nil {
							return r.Error
						}
					}
					return protocol.ProcessMessageResult{Processed: true}
				})
				c.Initialize(name)
				c.Subscribe("ring:"+name, "")
			}
			var r protocol.SendMessageResult
			clients["A"].MustCall("sendMessage", map[string]any{"topic": "ring:" + ring[1], "payload": map[string]any{"type": "hop", "hops": 1}}, &r)
			assert.True(t, r.Acks[0].Processed, r.Acks[0].Error)
			assert.Equal(t, int32(len(ring)), hops.Load())
		})
	}
}

// TestConcurrentPublishers: 1,000 publishers at once; every message is
// delivered exactly once.
func TestConcurrentPublishers(t *testing.T) {
	srv := bustest.Start(t, nil)
	var mu sync.Mutex
	seen := map[string]int{}
	sub := bustest.Connect(t, srv.URL, "sink", func(p protocol.ProcessMessageParams) any {
		mu.Lock()
		seen[p.MessageID]++
		mu.Unlock()
		return protocol.ProcessMessageResult{Processed: true}
	})
	sub.Subscribe("load:*", "")
	const publishers = 1000
	const conns = 20 // publishers share connections, each call its own request
	pubs := make([]*bustest.Client, conns)
	for i := range pubs {
		pubs[i] = bustest.Connect(t, srv.URL, fmt.Sprintf("pub-%d", i), nil)
	}
	ids := make(chan string, publishers)
	var wg sync.WaitGroup
	for i := range publishers {
		wg.Go(func() {
			r := pubs[i%conns].Publish(fmt.Sprintf("load:%d", i), "x")
			if r.Success && len(r.Acks) == 1 && r.Acks[0].Processed {
				ids <- r.MessageID
			}
		})
	}
	wg.Wait()
	close(ids)
	acked := map[string]bool{}
	for id := range ids {
		acked[id] = true
	}
	assert.Len(t, acked, publishers, "every publisher got a processed ack and a distinct messageId")
	mu.Lock()
	defer mu.Unlock()
	assert.Len(t, seen, publishers)
	for id, n := range seen {
		if n != 1 {
			t.Errorf("message %s delivered %d times", id, n)
		}
	}
}

// TestContinueAllFansOut pins when each subscriber of a chain is invoked:
// as soon as every earlier subscriber whose policy may stop the walk has
// answered, so a run of continueAll subscribers and the one after them
// are invoked together (a wave), and the acks keep the chain order. Each
// subscriber blocks until the test releases it; a wave is released only
// after all of it has started, which a walk waiting for continueAll
// answers would never reach.
func TestContinueAllFansOut(t *testing.T) {
	const (
		all     = protocol.PolicyContinueAll
		onProc  = protocol.PolicyStopOnProcessed
		onStop  = protocol.PolicyStopOnStop
		goOn    = "go on"
		stopNow = "stop"
	)
	type sub struct {
		policy protocol.Policy
		answer string
	}
	tests := []struct {
		name  string
		chain []sub
		waves [][]int // the subscribers invoked together, wave by wave
		acks  int     // how many deliveries the walk made
	}{
		{"all continueAll", []sub{{all, stopNow}, {all, stopNow}, {all, goOn}}, [][]int{{0, 1, 2}}, 3},
		{"stop-capable one at a time", []sub{{onProc, goOn}, {onStop, goOn}, {onProc, goOn}}, [][]int{{0}, {1}, {2}}, 3},
		{"continueAll runs with the next", []sub{{all, goOn}, {onProc, goOn}, {all, goOn}, {all, goOn}}, [][]int{{0, 1}, {2, 3}}, 4},
		{"a wave after a stop-capable one", []sub{{onStop, goOn}, {all, goOn}, {onProc, goOn}}, [][]int{{0}, {1, 2}}, 3},
		{"a stop ends the walk", []sub{{all, goOn}, {onProc, stopNow}, {all, goOn}}, [][]int{{0, 1}}, 2},
		{"continueAll last", []sub{{onProc, goOn}, {all, goOn}}, [][]int{{0}, {1}}, 2},
	}
	patterns := []string{"f:xyz*", "f:xy*", "f:x*", "f:*", "f*"}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := bustest.Start(t, nil)
			n := len(tt.chain)
			var mu sync.Mutex
			answered := make([]bool, n)
			var violations []string
			started := make(chan int, n)
			release := make([]chan struct{}, n)
			// Subscribed oldest first, so that subscriber i is i-th in the
			// chain (newest first).
			for i := n - 1; i >= 0; i-- {
				release[i] = make(chan struct{})
				c := bustest.Connect(t, srv.URL, fmt.Sprint("s", i), func(protocol.ProcessMessageParams) any {
					mu.Lock()
					for j := range i {
						if tt.chain[j].policy.MayStop() && !answered[j] {
							violations = append(violations, fmt.Sprintf("s%d invoked before s%d answered", i, j))
						}
					}
					mu.Unlock()
					started <- i
					<-release[i]
					mu.Lock()
					answered[i] = true
					mu.Unlock()
					if tt.chain[i].answer == stopNow {
						return protocol.ProcessMessageResult{Processed: true, StopPropagation: true}
					}
					return protocol.ProcessMessageResult{}
				})
				c.Subscribe(patterns[i], tt.chain[i].policy)
			}
			pub := bustest.Connect(t, srv.URL, "pub", nil)
			done := make(chan bustest.Response, 1)
			go func() {
				done <- pub.Call(protocol.MethodSendMessage, map[string]any{"topic": "f:xyz", "payload": map[string]any{"type": "t"}})
			}()
			for w, wave := range tt.waves {
				var got []int
				for range wave {
					select {
					case i := <-started:
						got = append(got, i)
					case <-time.After(bustest.Timeout):
						t.Fatalf("wave %d: only %v started, want %v together", w, got, wave)
					}
				}
				require.ElementsMatch(t, wave, got, "wave %d", w)
				// The wave's last subscriber is the one the walk waits for.
				close(release[wave[len(wave)-1]])
			}
			for i, ch := range release {
				if !slices.ContainsFunc(tt.waves, func(w []int) bool { return w[len(w)-1] == i }) {
					close(ch)
				}
			}
			var r protocol.SendMessageResult
			select {
			case resp := <-done:
				require.Nil(t, resp.Error)
				require.NoError(t, json.Unmarshal(resp.Result, &r))
			case <-time.After(bustest.Timeout):
				t.Fatal("no sendMessage result")
			}
			require.Len(t, r.Acks, tt.acks)
			for i, a := range r.Acks {
				assert.Equal(t, fmt.Sprint("s", i), a.ClientID, "ack %d", i)
			}
			// The result comes after every delivery answered: any
			// subscriber invoked has started by now.
			assert.Empty(t, started, "subscribers invoked beyond the waves")
			mu.Lock()
			assert.Empty(t, violations)
			mu.Unlock()
		})
	}
}
