package peer_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/peer"
	"github.com/bub-bus/bub/protocol"
)

// After the bus restarts, the Conn is back with its subscriptions in their
// original order, so last-match-wins routing is what it was.
func TestReconnectRestoresSubscriptionsInOrder(t *testing.T) {
	b := startBus(t, nil)
	c := dial(t, b.URL, "agent", nil)
	answer := func(name string) peer.Handler {
		return func(context.Context, *peer.Delivery) (peer.Result, error) {
			return peer.Result{Message: name}, nil
		}
	}
	ctx := t.Context()
	// Restored out of order, x:* would come before x:1, or x: before x:*,
	// and the messages below would meet a different subscription first.
	require.NoError(t, c.Subscribe(ctx, "x:", answer("prefix"), &peer.SubscribeOptions{Policy: protocol.PolicyContinueAll}))
	require.NoError(t, c.Subscribe(ctx, "x:*", answer("wide"), &peer.SubscribeOptions{Policy: protocol.PolicyContinueAll}))
	require.NoError(t, c.Subscribe(ctx, "x:1", answer("narrow"), &peer.SubscribeOptions{Policy: protocol.PolicyContinueAll}))
	require.NoError(t, c.Subscribe(ctx, "y", answer("y"), nil))
	require.NoError(t, c.Unsubscribe(ctx, "y"))

	b.restart()
	pub := dial(t, b.URL, "pub", &peer.Options{NoReconnect: true})
	// Patterns come back one by one; x:1, the newest, comes back last.
	eventually(t, 5*time.Second, func() bool {
		r, err := pub.SendMessage(ctx, "x:1", msg("x"), nil)
		require.NoError(t, err)
		return len(r.Acks) == 1 && r.Acks[0].Subscription == "x:1"
	})
	r, err := pub.SendMessage(ctx, "x:2", msg("x"), nil)
	require.NoError(t, err)
	assert.Equal(t, []protocol.Ack{{ClientID: "agent", Subscription: "x:*", Message: "wide"}}, r.Acks)
	r, err = pub.SendMessage(ctx, "y", msg("x"), nil)
	require.NoError(t, err)
	assert.False(t, r.Success, "an unsubscribed pattern stays unsubscribed")

	// The Conn's own calls work again, and a new subscription goes after
	// the restored ones.
	require.NoError(t, c.Subscribe(ctx, "x:2", answer("two"), nil))
	r, err = pub.SendMessage(ctx, "x:2", msg("x"), nil)
	require.NoError(t, err)
	assert.Equal(t, []protocol.Ack{{ClientID: "agent", Subscription: "x:2", Message: "two"}}, r.Acks)
}

// While the bus is gone, calls fail at once with ErrDisconnected rather
// than wait for the reconnect or the call timeout.
func TestCallsFailFastWhileDisconnected(t *testing.T) {
	b := startBus(t, nil)
	c := dial(t, b.URL, "c", &peer.Options{CallTimeout: 10 * time.Second, ReconnectMin: time.Hour, ReconnectMax: time.Hour})
	require.NoError(t, c.Subscribe(t.Context(), "s", processed, nil))
	b.stop()

	var err error
	eventually(t, 5*time.Second, func() bool {
		_, err = c.SendMessage(t.Context(), "s", msg("x"), nil)
		return err != nil
	})
	require.ErrorIs(t, err, peer.ErrDisconnected)

	for name, call := range map[string]func() error{
		"sendMessage": func() error { _, err := c.SendMessage(t.Context(), "s", msg("x"), nil); return err },
		"subscribe":   func() error { return c.Subscribe(t.Context(), "t", processed, nil) },
		"unsubscribe": func() error { return c.Unsubscribe(t.Context(), "s") },
		"ping":        func() error { _, err := c.Ping(t.Context()); return err },
	} {
		start := time.Now()
		err := call()
		assert.ErrorIs(t, err, peer.ErrDisconnected, name)
		assert.Less(t, time.Since(start), time.Second, name)
	}
	select {
	case <-c.Done():
		t.Fatal("a Conn that reconnects must not end")
	default:
	}
	assert.NoError(t, c.Err())
}

// A newer connection with the same clientId takes over; the old Conn ends
// rather than take the identity back.
func TestTakeoverEndsConn(t *testing.T) {
	b := startBus(t, nil)
	old := dial(t, b.URL, "agent", nil)
	require.NoError(t, old.Subscribe(t.Context(), "agent:agent", processed, nil))
	newer := dial(t, b.URL, "agent", nil)

	select {
	case <-old.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the old Conn did not end after the takeover")
	}
	require.ErrorIs(t, old.Err(), peer.ErrTakenOver)
	_, err := old.SendMessage(t.Context(), "x", msg("x"), nil)
	require.ErrorIs(t, err, peer.ErrDisconnected)
	require.ErrorIs(t, err, peer.ErrTakenOver)

	_, err = newer.Ping(t.Context())
	require.NoError(t, err)
}

func TestNoReconnectEndsWithTheConnection(t *testing.T) {
	b := startBus(t, nil)
	c := dial(t, b.URL, "c", &peer.Options{NoReconnect: true})
	b.stop()
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the Conn did not end")
	}
	require.Error(t, c.Err())
	assert.Contains(t, c.Err().Error(), "connection to "+b.URL+" lost")
	_, err := c.SendMessage(t.Context(), "x", msg("x"), nil)
	require.ErrorIs(t, err, peer.ErrDisconnected)
}

func TestCallTimeout(t *testing.T) {
	b := startBus(t, nil)
	release := make(chan struct{})
	defer close(release)
	sub := dial(t, b.URL, "sub", nil)
	require.NoError(t, sub.Subscribe(t.Context(), "slow", func(context.Context, *peer.Delivery) (peer.Result, error) {
		<-release
		return peer.Result{Processed: true}, nil
	}, nil))
	pub := dial(t, b.URL, "pub", &peer.Options{CallTimeout: 100 * time.Millisecond})

	start := time.Now()
	_, err := pub.SendMessage(t.Context(), "slow", msg("x"), nil)
	require.ErrorIs(t, err, peer.ErrCallTimeout)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(start), 5*time.Second)

	// The caller's own deadline is reported as the caller's.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
	defer cancel()
	_, err = pub.SendMessage(ctx, "slow", msg("x"), nil)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.False(t, errors.Is(err, peer.ErrCallTimeout))
}

func TestCloseCancelsHandlersAndEndsCalls(t *testing.T) {
	b := startBus(t, nil)
	started := make(chan struct{})
	c := dial(t, b.URL, "c", nil)
	require.NoError(t, c.Subscribe(t.Context(), "wait", func(ctx context.Context, _ *peer.Delivery) (peer.Result, error) {
		close(started)
		<-ctx.Done()
		return peer.Result{}, ctx.Err()
	}, nil))
	pub := dial(t, b.URL, "pub", nil)
	acks := sendAsync(t, pub, "wait")
	<-started
	require.NoError(t, c.Close())
	require.NoError(t, c.Close(), "Close is idempotent")
	require.ErrorIs(t, c.Err(), peer.ErrClosed)
	_, err := c.SendMessage(t.Context(), "x", msg("x"), nil)
	require.ErrorIs(t, err, peer.ErrClosed)

	r := <-acks
	require.Len(t, r.Acks, 1)
	assert.NotEmpty(t, r.Acks[0].Error, "the delivery to a closed Conn failed")
}

func TestDialFailure(t *testing.T) {
	b := startBus(t, nil)
	url := b.URL
	b.stop()
	_, err := peer.Dial(t.Context(), url, &peer.Options{Logger: quiet})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "dial "+url)

	b2 := startBus(t, nil)
	_, err = peer.Dial(t.Context(), b2.URL, &peer.Options{ClientID: "two words", Logger: quiet})
	require.Error(t, err)
}
