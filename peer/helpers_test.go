package peer_test

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/peer"
	"github.com/bub-bus/bub/protocol"
)

var quiet = slog.New(slog.DiscardHandler)

// testBus is a real bus on a loopback port that can be stopped and started
// again on the same address, as a restarted daemon would be.
type testBus struct {
	t    testing.TB
	opts bus.Options
	addr string
	URL  string
	srv  *bus.Server
	http *httptest.Server
}

func startBus(t testing.TB, opts *bus.Options) *testBus {
	t.Helper()
	b := &testBus{t: t}
	if opts != nil {
		b.opts = *opts
	}
	b.opts.Logger = quiet
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	b.addr = ln.Addr().String()
	b.URL = "ws://" + b.addr + "/"
	b.serve(ln)
	t.Cleanup(b.stop)
	return b
}

func (b *testBus) serve(ln net.Listener) {
	srv, err := bus.New(&b.opts)
	require.NoError(b.t, err)
	b.srv = srv
	b.http = &httptest.Server{Listener: ln, Config: &http.Server{Handler: srv}}
	b.http.Start()
}

// stop shuts the bus down, closing every peer with 1001 (going away).
func (b *testBus) stop() {
	if b.srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = b.srv.Shutdown(ctx)
	b.http.Close()
	b.srv = nil
}

// restart stops the bus and starts a new one, with no subscriptions, on
// the same address.
func (b *testBus) restart() {
	b.stop()
	var ln net.Listener
	require.Eventually(b.t, func() bool {
		var err error
		ln, err = net.Listen("tcp", b.addr)
		return err == nil
	}, 5*time.Second, 5*time.Millisecond)
	b.serve(ln)
}

// dial connects a peer with quiet logs and a short reconnect backoff, and
// closes it when the test ends.
func dial(t testing.TB, url, clientID string, opts *peer.Options) *peer.Conn {
	t.Helper()
	var o peer.Options
	if opts != nil {
		o = *opts
	}
	o.ClientID = clientID
	o.Logger = quiet
	if o.ReconnectMin == 0 {
		o.ReconnectMin = 10 * time.Millisecond
	}
	if o.ReconnectMax == 0 {
		o.ReconnectMax = 100 * time.Millisecond
	}
	c, err := peer.Dial(context.Background(), url, &o)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// processed is a handler that handles everything.
func processed(context.Context, *peer.Delivery) (peer.Result, error) {
	return peer.Result{Processed: true}, nil
}

// msg is a valid payload of type typ.
func msg(typ string) map[string]any {
	return map[string]any{"type": typ}
}

// sendAsync publishes from c on a goroutine of its own, for a test that
// must act while the deliveries are running.
func sendAsync(t *testing.T, c *peer.Conn, topic string) <-chan *protocol.SendMessageResult {
	done := make(chan *protocol.SendMessageResult, 1)
	go func() {
		r, err := c.SendMessage(context.Background(), topic, msg("x"), nil)
		assert.NoError(t, err)
		done <- r
	}()
	return done
}
