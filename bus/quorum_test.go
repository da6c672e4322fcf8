package bus_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/cluster/clustertest"
	"github.com/bub-bus/bub/internal/checkfor"
	"github.com/bub-bus/bub/protocol"
)

// TestClusterMinority: a bus node left alone of three (the others
// stopped cleanly) says on /readyz
// that it is not ready within a node timeout, and answers what it cannot
// write (a subscribe, a held message, an initialize) with -32603 saying
// that it has no quorum and how many nodes it reaches, at once instead of
// after a timeout that names no cause.
func TestClusterMinority(t *testing.T) {
	nodes := clustertest.Start(t, clusterOptions(), "a", "b", "c")
	a := nodes[0]
	sub := bustest.Connect(t, a.URL, "sub", bustest.Processed)
	pub := bustest.Connect(t, a.URL, "pub", nil)
	fresh := bustest.Dial(t, a.URL)

	// Stopped cleanly, one after the other, as an operator stops them:
	// JetStream took about 16 s to notice that, and /readyz said ready
	// meanwhile.
	for _, n := range nodes[1:] {
		// The survivor is under test, not the leave: on a loaded box
		// the second leave can outlast its timeout while JetStream
		// moves the first node's leaders, and the node stops anyway.
		ctx, cancel := context.WithTimeout(t.Context(), clustertest.Timeout)
		if err := n.Shutdown(ctx); err != nil {
			t.Logf("shutdown of a node: %v", err)
		}
		cancel()
	}
	lost := time.Now()
	const want = "no quorum: 1 of 3 nodes reachable"
	readyz := func() (int, string) {
		resp, err := http.Get(a.HTTP.URL + "/readyz")
		require.NoError(t, err)
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	// Within the node timeout and a heartbeat on a quiet box (the log
	// line says how long it took); the wait's bound is a safety net,
	// not the promise, which no test on a loaded box can time.
	checkfor.Check(t, clustertest.Timeout, func() error {
		code, body := readyz()
		if code == http.StatusServiceUnavailable && strings.Contains(body, want) {
			t.Logf("/readyz not ready %v after the loss: %s", time.Since(lost).Round(time.Millisecond), strings.TrimSpace(body))
			return nil
		}
		return fmt.Errorf("/readyz %d %q %v after losing two of three nodes", code, body, time.Since(lost))
	})

	start := time.Now()
	for _, c := range []struct {
		what   string
		client *bustest.Client
		method string
		params any
	}{
		{"subscribe", sub, protocol.MethodSubscribe, protocol.SubscribeParams{Topic: "job:*"}},
		{"held publish", pub, protocol.MethodSendMessage, map[string]any{"topic": "agent:nobody", "payload": map[string]any{"type": "task"}}},
		{"initialize", fresh, protocol.MethodInitialize, protocol.InitializeParams{ClientID: "late"}},
	} {
		r := c.client.Call(c.method, c.params)
		if assert.NotNil(t, r.Error, "%s in a minority succeeded", c.what) {
			assert.EqualValues(t, protocol.CodeInternalError, r.Error.Code, c.what)
			assert.Contains(t, r.Error.Message, want, c.what)
		}
	}
	took := time.Since(start)
	t.Logf("three refusals took %v", took.Round(time.Millisecond))
	assert.Less(t, took, 3*time.Second, "the refusals waited for timeouts")
}
