package peer_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/auth"
	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/internal/checkfor"
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
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		r, err := pub.SendMessage(ctx, "x:1", msg("x"), nil)
		require.NoError(c, err)
		assert.True(c, len(r.Acks) == 1 && r.Acks[0].Subscription == "x:1", "acks %v", r.Acks)
	}, 5*time.Second, 5*time.Millisecond)
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
	require.Eventually(t, func() bool {
		_, err = c.SendMessage(t.Context(), "s", msg("x"), nil)
		return err != nil
	}, 5*time.Second, 5*time.Millisecond)
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

// A Conn given several URLs (the nodes of a cluster) connects to the
// first, and when that node goes away moves to the next, subscribing
// again there; when that one goes too, it wraps round to the first.
func TestReconnectMovesToTheNextURL(t *testing.T) {
	a, b := startBus(t, nil), startBus(t, nil)
	c := dial(t, a.URL+","+b.URL, "agent", nil)
	require.NoError(t, c.Subscribe(t.Context(), "x", func(context.Context, *peer.Delivery) (peer.Result, error) {
		return peer.Result{Message: "here"}, nil
	}, nil))
	want := []protocol.Ack{{ClientID: "agent", Subscription: "x", Message: "here"}}
	reaches := func(bus *testBus) func() bool {
		return func() bool {
			pub := dial(t, bus.URL, "pub", &peer.Options{NoReconnect: true})
			defer pub.Close()
			r, err := pub.SendMessage(t.Context(), "x", msg("x"), nil)
			require.NoError(t, err)
			return assert.ObjectsAreEqual(want, r.Acks)
		}
	}
	require.True(t, reaches(a)(), "connected to the first URL")
	require.False(t, reaches(b)(), "and not to the second")

	a.stop()
	require.Eventually(t, reaches(b), 10*time.Second, 5*time.Millisecond)

	a.restart()
	b.stop()
	require.Eventually(t, reaches(a), 10*time.Second, 5*time.Millisecond)
}

// A first URL with nothing behind it is skipped at once: Dial connects to
// the next without a reconnect's backoff.
func TestDialSkipsAnUnreachableURL(t *testing.T) {
	down, up := startBus(t, nil), startBus(t, nil)
	down.stop()
	c, err := peer.Dial(t.Context(), down.URL+", "+up.URL, &peer.Options{Logger: quiet, ReconnectMin: time.Hour, ReconnectMax: time.Hour})
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.Subscribe(t.Context(), "x", processed, nil))
	pub := dial(t, up.URL, "pub", nil)
	r, err := pub.SendMessage(t.Context(), "x", msg("x"), nil)
	require.NoError(t, err)
	require.Len(t, r.Acks, 1)
	assert.Equal(t, c.ClientID(), r.Acks[0].ClientID)

	// None reachable: the error is the last URL's.
	up.stop()
	_, err = peer.Dial(t.Context(), down.URL+","+up.URL, &peer.Options{Logger: quiet})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "dial "+up.URL)
}

// A node that refuses the credential ends Dial: the other nodes of the
// same bus would refuse it as well, and trying them would hide why.
func TestDialStopsAtARefusal(t *testing.T) {
	authn, err := auth.New(auth.Config{Identities: []auth.Identity{{Name: "someone", TokenSHA256: strings.Repeat("ab", 32), Grant: auth.Grant{ClientIDs: []string{"someone"}}}}}, t.TempDir())
	require.NoError(t, err)
	guarded, open := startBus(t, &bus.Options{Auth: authn}), startBus(t, nil)
	// No credential: the bus answers initialize with an error.
	_, err = peer.Dial(t.Context(), guarded.URL+","+open.URL, &peer.Options{Logger: quiet})
	require.EqualValues(t, protocol.CodeUnauthorized, protocol.CodeOf(err), "%v", err)
	assert.Contains(t, err.Error(), "initialize "+guarded.URL)
	// A wrong one: the bus refuses the upgrade.
	_, err = peer.Dial(t.Context(), guarded.URL+","+open.URL, &peer.Options{Logger: quiet, Token: "wrong"})
	require.ErrorIs(t, err, peer.ErrUnauthorized)
	assert.Contains(t, err.Error(), "dial "+guarded.URL)
}

// Every URL of the list is checked before any is dialed, and the bad one
// is named with its place in the list.
func TestDialNamesTheBadURL(t *testing.T) {
	b := startBus(t, nil)
	for _, tc := range []struct{ list, want string }{
		{b.URL + ",127.0.0.1:7892", `bus URL 2 of 2 ("127.0.0.1:7892")`},
		{b.URL + ",ftp://x/", `bus URL 2 of 2 ("ftp://x/") in "` + b.URL + `,ftp://x/": scheme must be ws or wss, not "ftp"`},
		{b.URL + ",ws:///", `bus URL 2 of 2 ("ws:///") in "` + b.URL + `,ws:///" has no host`},
		{b.URL + ",,", `bus URL 2 of 3 ("")`},
		{"ws://127.0.0.1:/", `bus URL "ws://127.0.0.1:/" has an empty port after "127.0.0.1:"`},
		{"ws://a/,ws://%zz/," + b.URL, `bus URL 2 of 3 ("ws://%zz/")`},
		{"", `bus URL "" is empty`},
		{"tcp://x/", `bus URL "tcp://x/": scheme must be ws or wss`},
		// A URL's user:password is never shown.
		{"ws://alice:s3cret@127.0.0.1:/", `bus URL "ws://127.0.0.1:/" has an empty port`},
		{"ws://a/,ws://alice:s3cret@%zz/", `bus URL 2 of 2 ("ws://%zz/") in "ws://a/,ws://%zz/"`},
		{"ws://alice:s3cret@127.0.0.1:1/", `dial ws://127.0.0.1:1/`},
	} {
		_, err := peer.Dial(t.Context(), tc.list, &peer.Options{Logger: quiet})
		require.Error(t, err, tc.list)
		assert.Contains(t, err.Error(), tc.want, tc.list)
		assert.NotContains(t, err.Error(), "s3cret", tc.list)
	}
}

// A bus that comes back refusing the credential (restarted with auth, a
// key rotated) ends a reconnecting Conn with ErrRefused, the bus's
// answer wrapped: retrying the same token used to go on forever, logged
// at INFO every few seconds. With RetryUnauthorized it keeps trying, and
// is back once the bus accepts it again.
func TestReconnectRefusedCredentialIsFinal(t *testing.T) {
	authn, err := auth.New(auth.Config{Identities: []auth.Identity{{Name: "someone", TokenSHA256: strings.Repeat("ab", 32), Grant: auth.Grant{ClientIDs: []string{"someone"}}}}}, t.TempDir())
	require.NoError(t, err)

	t.Run("ends", func(t *testing.T) {
		b := startBus(t, nil)
		c := dial(t, b.URL, "agent", nil)
		b.opts.Auth = authn
		b.restart()
		select {
		case <-c.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("the Conn still runs against a bus that refuses it; Err: %v", c.Err())
		}
		require.ErrorIs(t, c.Err(), peer.ErrRefused)
		assert.EqualValues(t, protocol.CodeUnauthorized, protocol.CodeOf(c.Err()), "%v", c.Err())
		assert.Contains(t, c.Err().Error(), b.URL)
	})

	t.Run("retries when asked", func(t *testing.T) {
		b := startBus(t, nil)
		refusals := make(chan struct{}, 100)
		logs := slog.New(recordFunc(func(r slog.Record) {
			if r.Message == "reconnect failed" {
				select {
				case refusals <- struct{}{}:
				default:
				}
			}
		}))
		c, err := peer.Dial(t.Context(), b.URL, &peer.Options{ClientID: "agent", Logger: logs, RetryUnauthorized: true, ReconnectMin: 10 * time.Millisecond, ReconnectMax: 50 * time.Millisecond})
		require.NoError(t, err)
		defer c.Close()
		require.NoError(t, c.Subscribe(t.Context(), "x", processed, nil))
		b.opts.Auth = authn
		b.restart()
		for range 2 {
			select {
			case <-refusals:
			case <-c.Done():
				t.Fatalf("the Conn ended: %v", c.Err())
			case <-time.After(10 * time.Second):
				t.Fatal("no refused reconnect logged in 10s")
			}
		}
		b.opts.Auth = nil
		b.restart()
		pub := dial(t, b.URL, "pub", nil)
		checkfor.Check(t, 10*time.Second, func() error {
			r, err := pub.SendMessage(t.Context(), "x", msg("x"), nil)
			if err != nil || len(r.Acks) != 1 || r.Acks[0].ClientID != "agent" {
				return fmt.Errorf("the Conn is not back with its subscription: acks %+v, err %v", r, err)
			}
			return nil
		})
	})
}

// recordFunc is a slog.Handler that hands every record to a func.
type recordFunc func(slog.Record)

func (f recordFunc) Enabled(context.Context, slog.Level) bool      { return true }
func (f recordFunc) Handle(_ context.Context, r slog.Record) error { f(r); return nil }
func (f recordFunc) WithAttrs([]slog.Attr) slog.Handler            { return f }
func (f recordFunc) WithGroup(string) slog.Handler                 { return f }

// Bind's context ends with the Conn, and only then.
func TestBindEndsWithTheConn(t *testing.T) {
	b := startBus(t, nil)
	c := dial(t, b.URL, "agent", nil)
	ctx, unbind := c.Bind(t.Context())
	defer unbind()
	require.NoError(t, ctx.Err(), "a live Conn's bound context ended")
	require.NoError(t, c.Close())
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the bound context outlived the Conn")
	}
}
