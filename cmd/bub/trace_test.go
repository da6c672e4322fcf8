package main

import (
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/bus/journal"
	"github.com/bub-bus/bub/cluster/clustertest"
	"github.com/bub-bus/bub/protocol"
)

// TestTraceAndTail runs bub serve, follows its journal with bub tail,
// publishes over HTTP to a subscriber that answers and a reply that
// names the message, and checks bub trace tells that story in order and
// bub tail printed it as it happened.
func TestTraceAndTail(t *testing.T) {
	t.Parallel()
	d := startBus(t, t.TempDir(), "--log-level", "warn")
	bustest.Connect(t, d.url, "worker", bustest.Processed).Subscribe("jobs:*", protocol.PolicyContinueAll)

	tail := exec.Command(bubBinary, "tail", "--topic", "jobs:*", "--since", "1h", "--bus-url", d.url)
	tailOut := &lockedBuffer{}
	tail.Stdout, tail.Stderr = tailOut, tailOut
	require.NoError(t, tail.Start())
	t.Cleanup(func() {
		_ = tail.Process.Kill()
		_ = tail.Wait()
	})

	res, err := http.Post(d.http+"/v1/messages", "application/json", strings.NewReader(`{"topic":"jobs:a","payload":{"type":"t"},"clientId":"cron"}`))
	require.NoError(t, err)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	require.Equal(t, 201, res.StatusCode, string(body))
	id := strings.Split(string(body), `"`)[3]

	reply := bustest.Dial(t, d.url)
	reply.Initialize("worker-reply")
	var answer protocol.SendMessageResult
	reply.MustCall(protocol.MethodSendMessage, map[string]any{"topic": "outbound:x", "payload": map[string]any{"type": "answer"},
		"meta": map[string]any{"correlation_id": id}}, &answer)

	var out string
	require.Eventually(t, func() bool {
		out, _, _ = bub(t, nil, "", "trace", id, "--bus-url", d.url)
		return strings.Contains(out, "delivery") && strings.Contains(out, answer.MessageID)
	}, bustest.Timeout, 50*time.Millisecond)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	want := []string{
		"accepted        jobs:a from cron over http from 127.0.0.1:",
		"routed          to worker",
		"delivery        to worker (jobs:*), attempt 1: processed",
		"accepted        [" + answer.MessageID + "] outbound:x from worker-reply over websocket from 127.0.0.1:",
		"routed          [" + answer.MessageID + "] to nobody (no_subscribers)",
	}
	require.Len(t, lines, len(want), out)
	for i, w := range want {
		require.Contains(t, lines[i], w, out)
	}
	require.Contains(t, lines[3], "answering "+id)

	_, stderr, code := bub(t, nil, "", "trace", "nope-1", "--bus-url", d.url)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "no journal events for message nope-1")

	require.Eventually(t, func() bool {
		s := tailOut.String()
		return strings.Contains(s, id+" ") && strings.Contains(s, "accepted        jobs:a from cron") && strings.Contains(s, "delivery        to worker (jobs:*), attempt 1: processed")
	}, bustest.Timeout, 50*time.Millisecond, "bub tail printed the story as it happened")
	require.NotContains(t, tailOut.String(), answer.MessageID, "outbound:x is not jobs:*")
}

// TestTraceCluster runs bub trace against a cluster of two nodes (in
// this process): a message published on a, delivered on b, with the
// reply published on b, is told whole, each event once, whether
// --bus-url names one node or both.
func TestTraceCluster(t *testing.T) {
	t.Parallel()
	nodes := clustertest.StartExtended(t, nil, func(string) []bus.Extension { return []bus.Extension{journal.New(nil)} }, "a", "b")
	a, b := nodes[0], nodes[1]
	bustest.Connect(t, b.URL, "worker", bustest.Processed).Subscribe("jobs:*", protocol.PolicyContinueAll)
	pub := bustest.Connect(t, a.URL, "pub", nil)
	var id string
	require.Eventually(t, func() bool {
		r := pub.Publish("jobs:1", "t")
		id = r.MessageID
		return len(r.Acks) == 1 && r.Acks[0].Processed
	}, bustest.Timeout, 20*time.Millisecond)
	var answer protocol.SendMessageResult
	bustest.Connect(t, b.URL, "replier", nil).MustCall(protocol.MethodSendMessage, map[string]any{"topic": "outbound:x",
		"payload": map[string]any{"type": "answer"}, "meta": map[string]any{"correlation_id": id}}, &answer)

	want := []string{"accepted ", "routed ", "delivery ", "accepted [" + answer.MessageID, "routed [" + answer.MessageID}
	for _, urls := range []string{b.URL, a.URL + "," + b.URL} {
		var out string
		require.Eventually(t, func() bool {
			out, _, _ = bub(t, nil, "", "trace", id, "--bus-url", urls)
			return strings.Count(out, "\n") >= len(want)
		}, bustest.Timeout, 50*time.Millisecond)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		require.Len(t, lines, len(want), "--bus-url %s:\n%s", urls, out)
		for i, w := range want {
			require.Contains(t, strings.Join(strings.Fields(lines[i]), " "), w, "--bus-url %s:\n%s", urls, out)
		}
	}
}
