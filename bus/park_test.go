//go:build linux

package bus_test

import (
	"context"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/protocol"
)

// Idle connections park (docs/BENCHMARKS.md, "Idle connection memory"):
// no goroutine of the bus reads them until their peer sends. These tests
// check that a parked connection is still a whole connection.

// parked waits until srv counts n parked connections.
func parked(t *testing.T, srv *bustest.Server, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return metric(t, srv, "bub_connections_parked", "") == float64(n) },
		bustest.Timeout, time.Millisecond, "want %d parked connections, have %v", n, metric(t, srv, "bub_connections_parked", ""))
}

// A parked subscriber still gets deliveries written to it, and its answer
// wakes it; a parked publisher's request is read when it comes.
func TestParkedConnsDeliverAndRead(t *testing.T) {
	srv := bustest.Start(t, nil)
	delivered := make(chan string, 1)
	sub := bustest.Connect(t, srv.URL, "sub", func(p protocol.ProcessMessageParams) any {
		delivered <- p.MessageID
		return protocol.ProcessMessageResult{Processed: true}
	})
	sub.Subscribe("idle.topic", "")
	pub := bustest.Connect(t, srv.URL, "pub", nil)
	for i := range 3 {
		parked(t, srv, 2)
		res := pub.Publish("idle.topic", "note")
		require.True(t, res.Success, "round %d: %+v", i, res)
		select {
		case id := <-delivered:
			require.Equal(t, res.MessageID, id)
		case <-time.After(bustest.Timeout):
			t.Fatalf("round %d: the parked subscriber got no delivery", i)
		}
	}
	parked(t, srv, 2)
	require.Nil(t, pub.Call(protocol.MethodPing, nil).Error, "a parked connection reads a request sent later")
	parked(t, srv, 2)
}

// A peer that hangs up while parked is cleaned up: its connection, its
// subscription and its place among the parked go (and the package's
// TestMain finds no goroutine and no parked connection left over).
func TestParkedPeerHangsUp(t *testing.T) {
	srv := bustest.Start(t, nil)
	c := bustest.Connect(t, srv.URL, "gone", nil)
	c.Subscribe("gone.topic", "")
	parked(t, srv, 1)
	require.Equal(t, 1.0, metric(t, srv, "bub_subscriptions", ""))
	require.NoError(t, c.WS.CloseNow())
	require.Eventually(t, func() bool {
		return metric(t, srv, "bub_connections", "") == 0 && metric(t, srv, "bub_subscriptions", "") == 0
	}, bustest.Timeout, time.Millisecond)
	parked(t, srv, 0)
}

// Shutdown closes parked connections with 1001 and drains: it returns
// once every one has ended.
func TestShutdownClosesParkedConns(t *testing.T) {
	srv := bustest.Start(t, nil)
	clients := make([]*bustest.Client, 3)
	for i := range clients {
		clients[i] = bustest.Connect(t, srv.URL, "idle-"+string(rune('a'+i)), nil)
	}
	parked(t, srv, len(clients))
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()
	require.NoError(t, srv.Shutdown(ctx))
	for _, c := range clients {
		require.Equal(t, websocket.StatusGoingAway, c.Closed())
	}
	parked(t, srv, 0)
	require.Equal(t, 0.0, metric(t, srv, "bub_connections", ""))
}

// The keepalive's pings reach parked connections, and their pongs wake
// them only for as long as it takes to see them: a peer that answers
// stays connected, and parked, ping after ping.
// TestKeepaliveKeepsAnsweringPeer checks that one that stops answering
// is dropped.
func TestParkedConnsAnswerPings(t *testing.T) {
	srv := bustest.Start(t, &bus.Options{PingInterval: 100 * time.Millisecond})
	pings := make(chan struct{}, 10)
	ws, _, err := websocket.Dial(t.Context(), srv.URL, &websocket.DialOptions{OnPingReceived: func(context.Context, []byte) bool {
		pings <- struct{}{}
		return true
	}})
	require.NoError(t, err)
	answers := make(chan []byte, 1)
	go func() {
		defer close(answers)
		for {
			_, data, err := ws.Read(context.Background())
			if err != nil {
				return
			}
			answers <- data
		}
	}()
	defer func() {
		ws.CloseNow()
		for range answers {
		}
	}()
	require.NoError(t, ws.Write(t.Context(), websocket.MessageText, []byte(`{"jsonrpc":"2.0","method":"initialize","params":{"clientId":"pinged"},"id":1}`)))
	require.NotContains(t, string(<-answers), `"error"`)
	for i := range 3 {
		select {
		case <-pings:
		case <-time.After(bustest.Timeout):
			t.Fatalf("ping %d never came", i)
		}
		parked(t, srv, 1)
	}
	require.Equal(t, 1.0, metric(t, srv, "bub_connections", ""))
}
