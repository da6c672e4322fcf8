package bus_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"runtime/pprof"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/protocol"
)

// A continueAll fan-out is written by its walker, the publisher's read
// loop, and carried on by the answers (walk.go): while every subscriber
// holds its delivery, no goroutine of the bus waits on one, as one per
// delivery did before, nor on the walk; and each subscriber's call left
// in one write.
func TestFanOutStartsNoGoroutinePerDelivery(t *testing.T) {
	const subscribers = 40
	srv := bustest.Start(t, &bus.Options{DeliveryTimeout: time.Minute})
	invoked, release := waitingSubscribers(t, srv.URL, subscribers, protocol.ProcessMessageResult{Processed: true})
	writes := make([]uint64, subscribers)
	for i := range subscribers {
		writes[i], _ = bus.ClientConn(srv.Server, fmt.Sprint("s", i)).WriteStats()
	}
	// Relayed on the read loop once initialize's in-order goroutine ends.
	pub := connectPublisher(t, srv, "pub")
	pub.Send(`{"jsonrpc":"2.0","id":"fan","method":"sendMessage","params":{"topic":"fanout","payload":{"type":"t"}}}`)
	awaitInvoked(t, invoked, subscribers)
	var stacks bytes.Buffer
	require.NoError(t, pprof.Lookup("goroutine").WriteTo(&stacks, 1))
	assert.NotContains(t, stacks.String(), "bus.(*Server).deliverInTurn", "a goroutine waits on a delivery")
	assert.NotContains(t, stacks.String(), "bus.(*Server).walk", "a goroutine waits for the walk")
	for i := range subscribers {
		w, _ := bus.ClientConn(srv.Server, fmt.Sprint("s", i)).WriteStats()
		assert.Equal(t, uint64(1), w-writes[i], "write calls to s%d", i)
	}
	close(release)
	var r protocol.SendMessageResult
	pub.RecvResult(&r)
	require.Len(t, r.Acks, subscribers)
	for i, a := range r.Acks {
		assert.True(t, a.Processed, "ack %d: %+v", i, a)
	}
}

// The walk's one timer bounds each call by DeliveryTimeout from its own
// write, not from the walk's first: "next" waits for "first" to answer
// (its policy may stop the walk), so "late" and "silent" are called
// later, and "late" answers within its own timeout though past the first
// call's. "silent" never answers and times out.
func TestWalkTimesEachCallFromItsWrite(t *testing.T) {
	const timeout = 2 * time.Second
	srv := bustest.Start(t, &bus.Options{DeliveryTimeout: timeout, Limits: bus.Limits{SlowSubscriberTimeouts: -1}})
	answerAfter := func(d time.Duration, r protocol.ProcessMessageResult) bustest.ProcessFunc {
		return func(protocol.ProcessMessageParams) any {
			<-time.After(d)
			return r
		}
	}
	done := make(chan struct{})
	defer close(done)
	// Subscribed oldest first: the chain is silent, late, first.
	bustest.Connect(t, srv.URL, "silent", func(protocol.ProcessMessageParams) any {
		<-done
		return protocol.ProcessMessageResult{}
	}).Subscribe("w*", protocol.PolicyContinueAll)
	bustest.Connect(t, srv.URL, "late", answerAfter(timeout*3/4, protocol.ProcessMessageResult{Processed: true})).Subscribe("w:*", protocol.PolicyContinueAll)
	bustest.Connect(t, srv.URL, "first", answerAfter(timeout/2, protocol.ProcessMessageResult{})).Subscribe("w:t", protocol.PolicyStopOnProcessed)
	r := bustest.Connect(t, srv.URL, "pub", nil).Publish("w:t", "t")
	require.Len(t, r.Acks, 3)
	want := []struct {
		client    string
		processed bool
		err       string
	}{{"first", false, ""}, {"late", true, ""}, {"silent", false, "timeout"}}
	for i, w := range want {
		a := r.Acks[i]
		assert.Equal(t, w.client, a.ClientID, "ack %d", i)
		assert.Equal(t, w.processed, a.Processed, "ack %d: %+v", i, a)
		if w.err == "" {
			assert.Empty(t, a.Error, "ack %d", i)
		} else {
			assert.Contains(t, a.Error, w.err, "ack %d", i)
		}
	}
}

// A walk on a read loop never waits for room in a subscriber's queue: a
// delivery to a connection whose queue is full (its peer stopped reading)
// is made on a goroutine, and the walk goes on to the other subscribers,
// and the publisher's read loop to its next requests, while it waits.
func TestFanOutPastAFullQueue(t *testing.T) {
	srv := bustest.Start(t, &bus.Options{DeliveryTimeout: time.Minute, WriteTimeout: time.Minute, MaxMessageBytes: 4 << 20,
		MaxInFlight: 64, Limits: bus.Limits{SlowSubscriberTimeouts: -1}})
	healthy := make(chan string, 4)
	h := bustest.Connect(t, srv.URL, "healthy", func(p protocol.ProcessMessageParams) any {
		healthy <- p.Topic
		return protocol.ProcessMessageResult{Processed: true}
	})
	h.Subscribe("fan", protocol.PolicyContinueAll)
	h.Subscribe("other", protocol.PolicyContinueAll)
	// Subscribed after healthy, so first in the fan-out's chain.
	ws := dialSilentPeer(t, srv.URL,
		`{"jsonrpc":"2.0","method":"initialize","params":{"clientId":"stalled"},"id":1}`,
		`{"jsonrpc":"2.0","method":"subscribe","params":{"topic":"big"},"id":2}`,
		`{"jsonrpc":"2.0","method":"subscribe","params":{"topic":"fan*","policy":"continueAll"},"id":3}`)
	// Closed before the bus shuts down, so that the deliveries waiting on
	// it fail at once.
	defer ws.CloseNow()
	// Megabytes to the stalled peer, until its socket is full and its
	// queue has no room; their results come when the test ends. Each from
	// a publisher of its own: one publisher's messages take their turns
	// at the stalled peer one at a time (order.go), and would wait for
	// the write under way rather than queue behind it.
	pad := strings.Repeat("x", 1<<20)
	stalled := bus.ClientConn(srv.Server, "stalled")
	for n := 0; !stalled.QueueFull(); n++ {
		require.Less(t, n, 48, "the stalled peer's queue never filled")
		filler := bustest.Connect(t, srv.URL, fmt.Sprint("filler-", n), nil)
		filler.Send(fmt.Sprintf(`{"jsonrpc":"2.0","id":"big","method":"sendMessage","params":{"topic":"big","payload":{"type":"t","pad":"%s"}}}`, pad))
		for wait := time.Now().Add(time.Second); time.Now().Before(wait) && !stalled.QueueFull(); {
			<-time.After(10 * time.Millisecond)
		}
	}
	pub := bustest.Connect(t, srv.URL, "pub", nil)
	pub.Send(`{"jsonrpc":"2.0","id":"fan","method":"sendMessage","params":{"topic":"fan","payload":{"type":"t"}}}`)
	select {
	case topic := <-healthy:
		assert.Equal(t, "fan", topic)
	case <-time.After(bustest.Timeout):
		t.Fatal("the healthy subscriber waited on the stalled one")
	}
	// The publisher's read loop is free: a publish after the fan-out is
	// answered while the fan-out still waits on the stalled peer.
	r := pub.Publish("other", "t")
	require.Len(t, r.Acks, 1)
	assert.True(t, r.Acks[0].Processed)
}

// waitingSubscribers connects n continueAll subscribers of the topic
// "fanout", each under a pattern of its own (of identical ones only the
// newest counts), whose handlers note their invocation on invoked and
// answer result once release is closed.
func waitingSubscribers(t *testing.T, url string, n int, result protocol.ProcessMessageResult) (invoked <-chan struct{}, release chan struct{}) {
	called := make(chan struct{}, n)
	release = make(chan struct{})
	for i := range n {
		c := bustest.Connect(t, url, fmt.Sprint("s", i), func(protocol.ProcessMessageParams) any {
			called <- struct{}{}
			<-release
			return result
		})
		c.Subscribe("fan"+strings.Repeat("?", i%3)+strings.Repeat("*", i/3+1), protocol.PolicyContinueAll)
	}
	return called, release
}

// awaitInvoked waits until n subscribers have noted their invocation on
// invoked, each within bustest.Timeout of the one before.
func awaitInvoked(t *testing.T, invoked <-chan struct{}, n int) {
	t.Helper()
	for i := range n {
		select {
		case <-invoked:
		case <-time.After(bustest.Timeout):
			t.Fatalf("only %d of %d subscribers were invoked together", i, n)
		}
	}
}

// dialSilentPeer connects a raw WebSocket peer that sends frames, reads
// the answer to each, and then never reads again.
func dialSilentPeer(t *testing.T, url string, frames ...string) *websocket.Conn {
	t.Helper()
	ws, _, err := websocket.Dial(t.Context(), url, nil)
	require.NoError(t, err)
	for _, frame := range frames {
		require.NoError(t, ws.Write(t.Context(), websocket.MessageText, []byte(frame)))
		_, _, err := ws.Read(t.Context())
		require.NoError(t, err)
	}
	return ws
}

// Walks of several subscribers keep their steps, outcomes, acks and
// tickets from walk to walk (walk.go, walkScratch): two publishers fan
// out at once, again and again, to subscribers of their own, one of
// which answers every other message only after its delivery timed out;
// each result holds its own message's answers, and the timeouts, whose
// timer may fire as a walk ends and its scratch goes to the next, are its
// own.
func TestFanOutsReuseTheirScratch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const (
			subscribers = 5
			messages    = 12
			// On the bubble's clock: the subscribers that answer at
			// once never reach it, however loaded the box; the one that
			// waits 2x it always does, and its late answer comes while
			// a later walk has the scratch.
			timeout = 500 * time.Millisecond
		)
		srv := bustest.StartInMemory(t, &bus.Options{DeliveryTimeout: timeout, Limits: bus.Limits{SlowSubscriberTimeouts: -1}})
		done := make(chan struct{})
		defer close(done)
		for _, set := range []string{"a", "b"} {
			for i := range subscribers {
				id := fmt.Sprint(set, i)
				bustest.Connect(t, srv.URL, id, func(p protocol.ProcessMessageParams) any {
					var payload struct{ N int }
					_ = json.Unmarshal(p.Payload, &payload)
					if i == 0 && payload.N%2 == 1 {
						select {
						case <-time.After(2 * timeout):
						case <-done:
						}
					}
					return protocol.ProcessMessageResult{Processed: true, Message: fmt.Sprint(id, ":", payload.N)}
				}).Subscribe("r"+set+strings.Repeat("*", i+1), protocol.PolicyContinueAll)
			}
		}
		published := make(chan struct{})
		for _, set := range []string{"a", "b"} {
			pub := connectPublisher(t, srv, "pub-"+set)
			go func() {
				defer func() { published <- struct{}{} }()
				for n := range messages {
					r := pub.Call(protocol.MethodSendMessage, map[string]any{"topic": "r" + set, "payload": map[string]any{"type": "t", "n": n}})
					if !assert.Nil(t, r.Error) {
						return
					}
					var res protocol.SendMessageResult
					assert.NoError(t, json.Unmarshal(r.Result, &res))
					assert.Len(t, res.Acks, subscribers, "message %s %d", set, n)
					for _, a := range res.Acks {
						if a.ClientID == set+"0" && n%2 == 1 {
							assert.Contains(t, a.Error, "no answer within", "message %s %d: %+v", set, n, a)
							continue
						}
						assert.True(t, strings.HasPrefix(a.ClientID, set), "message %s %d: %+v", set, n, a)
						assert.Equal(t, fmt.Sprint(a.ClientID, ":", n), a.Message, "message %s %d: %+v", set, n, a)
					}
				}
			}()
		}
		<-published
		<-published
	})
}
