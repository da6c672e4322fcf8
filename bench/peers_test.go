package main

import (
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// relayDeadline bounds a test's relay; generous, as the box is shared.
const relayDeadline = time.Minute

// relayThrough relays n messages through sys to subs subscribers, window
// at a time, and requires each to be answered exactly once, unfailed.
func relayThrough(t *testing.T, sys system, subs, n, window, size int) {
	t.Helper()
	var (
		mu      sync.Mutex
		answers = make(map[uint64]int)
		failed  []uint64
	)
	slots := make(chan struct{}, window)
	pub, err := sys.open(subs, makePayload(size), func(id uint64, bad bool) {
		mu.Lock()
		answers[id]++
		if bad {
			failed = append(failed, id)
		}
		mu.Unlock()
		<-slots
	})
	require.NoError(t, err)
	defer pub.close()
	deadline := time.After(relayDeadline)
	for id := uint64(1); id <= uint64(n); id++ {
		select {
		case slots <- struct{}{}:
		case <-deadline:
			t.Fatalf("%s: message %d not sent within %s", sys.name(), id, relayDeadline)
		}
		require.NoError(t, pub.send(id))
	}
	for range window {
		select {
		case slots <- struct{}{}:
		case <-deadline:
			t.Fatalf("%s: last messages not answered within %s", sys.name(), relayDeadline)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, failed, "%s: failed messages", sys.name())
	require.Len(t, answers, n, "%s: messages answered", sys.name())
	for id, count := range answers {
		require.Equal(t, 1, count, "%s: answers to message %d", sys.name(), id)
	}
}

func startCentrifuge(t *testing.T) *centrifugeSystem {
	t.Helper()
	h, err := centrifugeHandler()
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &centrifugeSystem{&process{name: "centrifuge", addr: strings.TrimPrefix(srv.URL, "http://")}}
}

func TestCentrifugeRelay(t *testing.T) {
	sys := startCentrifuge(t)
	for _, tc := range []struct {
		name                   string
		subs, n, window, bytes int
	}{
		{"one at a time", 1, 50, 1, 1 << 10},
		{"pipelined", 1, 500, 64, 1 << 10},
		{"64 KiB pipelined", 1, 100, 64, 64 << 10},
		{"fan-out", 20, 50, 4, 1 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			relayThrough(t, sys, tc.subs, tc.n, tc.window, tc.bytes)
		})
	}
}

func TestCentrifugeIdleConnectionSubscribes(t *testing.T) {
	sys := startCentrifuge(t)
	c, err := sys.idle(0)
	require.NoError(t, err)
	require.NoError(t, c.Close())
}

// TestNATSOverWebSocket relays through nats-server's WebSocket listener
// with nats.go dialing ws://, and through its TCP listener next to it.
func TestNATSOverWebSocket(t *testing.T) {
	for _, ws := range []bool{false, true} {
		ns, addr, err := startNATS("127.0.0.1:0", ws)
		require.NoError(t, err)
		t.Cleanup(ns.Shutdown)
		sys := &natsSystem{proc: &process{name: "nats", addr: addr}, ws: ws}
		t.Run(sys.name(), func(t *testing.T) {
			relayThrough(t, sys, 1, 500, 64, 1<<10)
			relayThrough(t, sys, 20, 50, 4, 1<<10)
		})
	}
}

func TestParseCentrifuge(t *testing.T) {
	for _, tc := range []struct {
		msg  string
		want centrifugeMsg
	}{
		{`{}`, centrifugeMsg{kind: centrifugePing}},
		{` {} `, centrifugeMsg{kind: centrifugePing}},
		{`{"id":7,"publish":{}}`, centrifugeMsg{kind: centrifugeReply, id: 7}},
		{`{"id":7,"error":{"code":103,"message":"permission denied"}}`, centrifugeMsg{kind: centrifugeReply, id: 7, failed: true}},
		{`{"error":{"code":103},"id":8}`, centrifugeMsg{kind: centrifugeReply, id: 8, failed: true}},
		{`{"id":1,"connect":{"client":"c","version":"0.0.0","ping":25,"pong":true}}`, centrifugeMsg{kind: centrifugeReply, id: 1}},
		{`{"push":{"channel":"t1","pub":{"data":{"id":42,"payload":{"type":"bench"}}}}}`, centrifugeMsg{kind: centrifugePush, id: 42}},
		{`{"push":{"pub":{"offset":3,"data":{"payload":{"id":9},"id":43}},"channel":"t1"}}`, centrifugeMsg{kind: centrifugePush, id: 43}},
		// Pushes that carry no message id, and what is not JSON, are
		// nothing the harness answers.
		{`{"push":{"channel":"t1","join":{"info":{"client":"c"}}}}`, centrifugeMsg{}},
		{`{"push":{"channel":"t1","pub":{"data":{"id":"x"}}}}`, centrifugeMsg{}},
		{`{"id":`, centrifugeMsg{}},
		{``, centrifugeMsg{}},
		{`not json`, centrifugeMsg{}},
	} {
		require.Equal(t, tc.want, parseCentrifuge([]byte(tc.msg)), "message %q", tc.msg)
	}
}

func TestAckCounter(t *testing.T) {
	one := newAckCounter(1)
	require.True(t, one.complete(5))
	require.True(t, one.complete(5), "with one subscriber every ack completes its message")

	three := newAckCounter(3)
	require.False(t, three.complete(1))
	require.False(t, three.complete(2))
	require.False(t, three.complete(1))
	require.True(t, three.complete(1), "the third ack of message 1 completes it")
	require.False(t, three.complete(1), "a fourth starts over, not a second completion")
	require.False(t, three.complete(2))
	require.True(t, three.complete(2))
}
