package peer_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/peer"
	"github.com/bub-bus/bub/protocol"
)

// What a handler answers reaches the publisher's acks, and the policies
// read it: processed and stopPropagation decide whether older
// subscriptions are asked.
func TestHandlerResultReachesAcks(t *testing.T) {
	answer := func(r peer.Result) peer.Handler {
		return func(context.Context, *peer.Delivery) (peer.Result, error) { return r, nil }
	}
	for _, tt := range []struct {
		name   string
		policy protocol.Policy
		result peer.Result
		want   []protocol.Ack
	}{
		{
			name:   "processed stops under the default policy",
			result: peer.Result{Processed: true, Message: "mine"},
			want:   []protocol.Ack{{ClientID: "new", Subscription: "t:*", Processed: true, Message: "mine"}},
		},
		{
			name:   "not processed goes on",
			result: peer.Result{ShouldRetry: true, RetryAfter: 5 * time.Second, Message: "later"},
			want: []protocol.Ack{
				{ClientID: "new", Subscription: "t:*", Message: "later"},
				{ClientID: "old", Subscription: "t:", Processed: true, Message: "old"},
			},
		},
		{
			name:   "stopPropagation stops under stopPropagationOnStop",
			policy: protocol.PolicyStopOnStop,
			result: peer.Result{StopPropagation: true, Message: "halt"},
			want:   []protocol.Ack{{ClientID: "new", Subscription: "t:*", StopPropagation: true, Message: "halt"}},
		},
		{
			name:   "reject is dead-lettered at once",
			policy: protocol.PolicyStopOnStop,
			result: peer.Result{Reject: true, StopPropagation: true, Message: "never"},
			want:   []protocol.Ack{{ClientID: "new", Subscription: "t:*", StopPropagation: true, Message: "never", DeadLetter: "d-000000000001"}},
		},
		{
			name:   "continueAll goes on despite both",
			policy: protocol.PolicyContinueAll,
			result: peer.Result{Processed: true, StopPropagation: true},
			want: []protocol.Ack{
				{ClientID: "new", Subscription: "t:*", Processed: true, StopPropagation: true},
				{ClientID: "old", Subscription: "t:", Processed: true, Message: "old"},
			},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := startBus(t, nil)
			old := dial(t, b.URL, "old", nil)
			require.NoError(t, old.Subscribe(t.Context(), "t:", answer(peer.Result{Processed: true, Message: "old"}), nil))
			newer := dial(t, b.URL, "new", nil)
			require.NoError(t, newer.Subscribe(t.Context(), "t:*", answer(tt.result), &peer.SubscribeOptions{Policy: tt.policy}))
			pub := dial(t, b.URL, "pub", nil)
			result, err := pub.SendMessage(t.Context(), "t:1", msg("x"), nil)
			require.NoError(t, err)
			assert.Equal(t, tt.want, result.Acks)
		})
	}
}

// Each delivery runs the handler of the subscription that matched.
func TestDeliveryRunsTheMatchingHandler(t *testing.T) {
	b := startBus(t, nil)
	c := dial(t, b.URL, "c", nil)
	named := func(name string) peer.Handler {
		return func(_ context.Context, d *peer.Delivery) (peer.Result, error) {
			return peer.Result{Message: name + " got " + d.Topic}, nil
		}
	}
	require.NoError(t, c.Subscribe(t.Context(), "a:*", named("wide"), &peer.SubscribeOptions{Policy: protocol.PolicyContinueAll}))
	require.NoError(t, c.Subscribe(t.Context(), "a:1", named("narrow"), nil))
	pub := dial(t, b.URL, "pub", nil)

	r, err := pub.SendMessage(t.Context(), "a:1", msg("x"), nil)
	require.NoError(t, err)
	// One client appears once per message, under its newest matching
	// subscription.
	require.Len(t, r.Acks, 1)
	assert.Equal(t, "narrow got a:1", r.Acks[0].Message)

	r, err = pub.SendMessage(t.Context(), "a:2", msg("x"), nil)
	require.NoError(t, err)
	require.Len(t, r.Acks, 1)
	assert.Equal(t, "wide got a:2", r.Acks[0].Message)
}

func TestHandlerErrorAndPanicBecomeFailedDeliveries(t *testing.T) {
	b := startBus(t, nil)
	c := dial(t, b.URL, "c", nil)
	require.NoError(t, c.Subscribe(t.Context(), "panic", func(context.Context, *peer.Delivery) (peer.Result, error) {
		panic("boom")
	}, nil))
	require.NoError(t, c.Subscribe(t.Context(), "fail", func(context.Context, *peer.Delivery) (peer.Result, error) {
		return peer.Result{}, fmt.Errorf("database unavailable")
	}, nil))
	require.NoError(t, c.Subscribe(t.Context(), "ok", processed, nil))
	pub := dial(t, b.URL, "pub", nil)

	r, err := pub.SendMessage(t.Context(), "panic", msg("x"), nil)
	require.NoError(t, err)
	require.Len(t, r.Acks, 1)
	assert.False(t, r.Acks[0].Processed)
	assert.Contains(t, r.Acks[0].Error, `handler for "panic" panicked: boom`)
	assert.Contains(t, r.Acks[0].Error, fmt.Sprint(protocol.CodeInternalError))

	r, err = pub.SendMessage(t.Context(), "fail", msg("x"), nil)
	require.NoError(t, err)
	require.Len(t, r.Acks, 1)
	assert.Contains(t, r.Acks[0].Error, "database unavailable")

	// The panic took nothing down.
	r, err = pub.SendMessage(t.Context(), "ok", msg("x"), nil)
	require.NoError(t, err)
	require.Len(t, r.Acks, 1)
	assert.True(t, r.Acks[0].Processed)
}

// A delivery beyond MaxConcurrentHandlers is answered at once, asking for
// a retry, instead of queueing behind the running handler.
func TestBusyConnAnswersShouldRetry(t *testing.T) {
	b := startBus(t, nil)
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	c := dial(t, b.URL, "c", &peer.Options{MaxConcurrentHandlers: 1})
	require.NoError(t, c.Subscribe(t.Context(), "slow", func(context.Context, *peer.Delivery) (peer.Result, error) {
		started <- struct{}{}
		<-release
		return peer.Result{Processed: true}, nil
	}, nil))
	pub := dial(t, b.URL, "pub", nil)

	first := sendAsync(t, pub, "slow")
	<-started
	r, err := pub.SendMessage(t.Context(), "slow", msg("x"), nil)
	require.NoError(t, err)
	require.Len(t, r.Acks, 1)
	assert.False(t, r.Acks[0].Processed)
	assert.Contains(t, r.Acks[0].Message, "busy")

	close(release)
	r = <-first
	require.Len(t, r.Acks, 1)
	assert.True(t, r.Acks[0].Processed)
}

// A subscription with a bound of its own is not refused while the Conn's
// shared handlers are all taken, and takes none of them: the spawner's
// system:client.* events get through while every shared handler waits
// for an agent. Its own bound is enforced in turn.
func TestSubscriptionHandlerBoundIsItsOwn(t *testing.T) {
	b := startBus(t, nil)
	release := make(chan struct{})
	started := make(chan string, 2)
	block := func(_ context.Context, d *peer.Delivery) (peer.Result, error) {
		started <- d.Topic
		<-release
		return peer.Result{Processed: true}, nil
	}
	c := dial(t, b.URL, "c", &peer.Options{MaxConcurrentHandlers: 1})
	require.NoError(t, c.Subscribe(t.Context(), "shared", block, nil))
	require.NoError(t, c.Subscribe(t.Context(), "own", block, &peer.SubscribeOptions{MaxConcurrentHandlers: 1}))
	pub := dial(t, b.URL, "pub", nil)
	// Before the Conns close, which waits for their handlers.
	unblock := sync.OnceFunc(func() { close(release) })
	t.Cleanup(unblock)

	shared := sendAsync(t, pub, "shared")
	require.Equal(t, "shared", <-started)
	// The shared bound is taken; the subscription with its own is served.
	own := sendAsync(t, pub, "own")
	select {
	case topic := <-started:
		require.Equal(t, "own", topic)
	case r := <-own:
		t.Fatalf("refused while the shared handlers were taken: %+v", r.Acks)
	}
	// Each bound is full now, and each refuses on its own count.
	for _, topic := range []string{"shared", "own"} {
		r, err := pub.SendMessage(t.Context(), topic, msg("x"), nil)
		require.NoError(t, err)
		require.Len(t, r.Acks, 1, topic)
		assert.False(t, r.Acks[0].Processed, topic)
		assert.Equal(t, "busy: 1 handlers already running", r.Acks[0].Message, topic)
	}

	unblock()
	for _, r := range []*protocol.SendMessageResult{<-shared, <-own} {
		require.Len(t, r.Acks, 1)
		assert.True(t, r.Acks[0].Processed)
	}
}

// A handler that sends, and waits for its own send's acks, must not block
// the deliveries its send causes on the same connections.
func TestNestedSendsComplete(t *testing.T) {
	for _, tt := range []struct {
		name string
		hops []string // each client forwards to the next; the last answers
	}{
		{"A to B to A", []string{"a", "b", "a"}},
		{"A to B to C to A", []string{"a", "b", "c", "a"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := startBus(t, nil)
			conns := map[string]*peer.Conn{}
			for _, id := range tt.hops {
				if conns[id] == nil {
					conns[id] = dial(t, b.URL, id, nil)
				}
			}
			// hop:N is served by hops[N]; it forwards to hop:N+1, and the
			// last hop answers with the trail.
			for i, id := range tt.hops {
				next := i + 1
				require.NoError(t, conns[id].Subscribe(t.Context(), fmt.Sprintf("hop:%d", i), func(ctx context.Context, d *peer.Delivery) (peer.Result, error) {
					if next == len(tt.hops) {
						return peer.Result{Processed: true, Message: id}, nil
					}
					r, err := conns[id].SendMessage(ctx, fmt.Sprintf("hop:%d", next), msg("forward"), nil)
					if err != nil {
						return peer.Result{}, err
					}
					if len(r.Acks) != 1 || !r.Acks[0].Processed {
						return peer.Result{}, fmt.Errorf("hop %d: acks %+v", next, r.Acks)
					}
					return peer.Result{Processed: true, Message: id + ">" + r.Acks[0].Message}, nil
				}, nil))
			}
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() {
					r, err := conns[tt.hops[0]].SendMessage(ctx, "hop:0", msg("start"), nil)
					if assert.NoError(t, err) && assert.Len(t, r.Acks, 1) {
						want := tt.hops[0]
						for _, id := range tt.hops[1:] {
							want += ">" + id
						}
						assert.Equal(t, want, r.Acks[0].Message)
					}
				})
			}
			wg.Wait()
		})
	}
}

// A message on its way while its subscription is withdrawn is declined,
// not handled by some other handler, and the subscription's messages stop.
func TestUnsubscribe(t *testing.T) {
	b := startBus(t, nil)
	c := dial(t, b.URL, "c", nil)
	pub := dial(t, b.URL, "pub", nil)
	require.NoError(t, c.Subscribe(t.Context(), "x", processed, nil))
	require.NoError(t, c.Unsubscribe(t.Context(), "x"))
	r, err := pub.SendMessage(t.Context(), "x", msg("x"), nil)
	require.NoError(t, err)
	assert.False(t, r.Success)
	// The pattern may be held again.
	require.NoError(t, c.Subscribe(t.Context(), "x", processed, nil))
	r, err = pub.SendMessage(t.Context(), "x", msg("x"), nil)
	require.NoError(t, err)
	assert.True(t, r.Success)
}

// By default a handler's context ends before the bus stops waiting for
// it: the deadline comes from the delivery timeout the bus announced.
func TestHandlerDeadlineFollowsTheBus(t *testing.T) {
	b := startBus(t, &bus.Options{DeliveryTimeout: 2 * time.Second})
	sub := dial(t, b.URL, "sub", nil)
	left := make(chan time.Duration, 1)
	require.NoError(t, sub.Subscribe(t.Context(), "t", func(ctx context.Context, _ *peer.Delivery) (peer.Result, error) {
		deadline, ok := ctx.Deadline()
		if !ok {
			deadline = time.Now().Add(time.Hour)
		}
		left <- time.Until(deadline)
		return peer.Result{Processed: true}, nil
	}, nil))
	pub := dial(t, b.URL, "pub", nil)
	_, err := pub.SendMessage(t.Context(), "t", msg("x"), nil)
	require.NoError(t, err)
	d := <-left // sent before the handler answered
	assert.LessOrEqual(t, d, 1800*time.Millisecond, "a tenth of the bus's 2s is left for the answer")
	assert.Greater(t, d, time.Duration(0))
}
