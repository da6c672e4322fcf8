package bus_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
)

// TestKeepaliveKeepsAnsweringPeer: the one pinger serving every
// connection drops a silent peer and its subscription, and keeps pinging,
// and keeping, a peer beside it that answers.
//
// The live peer reads from the moment it connects, as a real one does: a
// pong goes out only while the socket is read. The interval is long
// enough that a loaded machine's scheduling delays do not make the live
// peer miss a ping.
func TestKeepaliveKeepsAnsweringPeer(t *testing.T) {
	srv := bustest.Start(t, &bus.Options{PingInterval: 300 * time.Millisecond})
	ctx := t.Context()
	pings := make(chan struct{}, 1)
	live, _, err := websocket.Dial(ctx, srv.URL, &websocket.DialOptions{OnPingReceived: func(context.Context, []byte) bool {
		select {
		case pings <- struct{}{}:
		default:
		}
		return true
	}})
	require.NoError(t, err)
	answers := make(chan []byte, 2)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		for {
			_, data, err := live.Read(context.Background())
			if err != nil {
				return
			}
			answers <- data
		}
	}()
	defer func() { live.CloseNow(); <-readDone }()
	silent, _, err := websocket.Dial(ctx, srv.URL, nil)
	require.NoError(t, err)
	defer silent.CloseNow()
	setup := func(id string) []string {
		return []string{
			`{"jsonrpc":"2.0","method":"initialize","params":{"clientId":"` + id + `"},"id":1}`,
			`{"jsonrpc":"2.0","method":"subscribe","params":{"topic":"` + id + `"},"id":2}`,
		}
	}
	for _, frame := range setup("live") {
		require.NoError(t, live.Write(ctx, websocket.MessageText, []byte(frame)))
		select {
		case answer := <-answers:
			require.NotContains(t, string(answer), `"error"`)
		case <-time.After(bustest.Timeout):
			t.Fatal("no answer to the live peer's " + frame)
		}
	}
	for _, frame := range setup("silent") {
		require.NoError(t, silent.Write(ctx, websocket.MessageText, []byte(frame)))
		_, _, err := silent.Read(ctx) // the answer; the silent peer never reads again
		require.NoError(t, err)
	}

	metrics := func() string {
		resp, err := srv.HTTP.Client().Get(srv.HTTP.URL + "/metrics")
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return string(body)
	}
	require.Eventually(t, func() bool {
		m := metrics()
		return strings.Contains(m, "bub_subscriptions 1\n") && strings.Contains(m, "bub_connections 1\n")
	}, bustest.Timeout, 10*time.Millisecond, "the silent peer should be dropped with its subscription")
	require.Contains(t, metrics(), `bub_connection_closes_total{reason="ping timed out"} 1`)
	// Each ping goes out only once the one before was answered, and
	// three more intervals pass while the live peer keeps answering.
	for range 3 {
		select {
		case <-pings:
		case <-time.After(bustest.Timeout):
			t.Fatal("the answering peer got no more pings")
		}
	}
	m := metrics()
	require.Contains(t, m, "bub_subscriptions 1\n")
	require.Contains(t, m, `bub_connection_closes_total{reason="ping timed out"} 1`)
}
