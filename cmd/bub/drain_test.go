package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/peer"
	"github.com/bub-bus/bub/protocol"
)

// TestServeDrain: on SIGTERM, bub serve keeps its listener while it
// drains, so that a load balancer reads /readyz "503 draining" and takes
// it out of rotation, /healthz still says it is alive, a new peer is
// refused, an HTTP publish is 503 with Retry-After, and a publisher
// waiting on a delivery in flight gets its result; then it exits 0.
func TestServeDrain(t *testing.T) {
	t.Parallel()
	d := startBus(t, t.TempDir(), "--delivery-timeout", "30s", "--drain-timeout", "30s")
	arrived, release := make(chan struct{}), make(chan struct{})
	slow := bustest.Connect(t, d.url, "slow", func(protocol.ProcessMessageParams) any {
		close(arrived)
		<-release
		return protocol.ProcessMessageResult{Processed: true, Message: "done late"}
	})
	slow.Subscribe("jobs:*", "")
	pub, err := peer.Dial(t.Context(), d.url, &peer.Options{ClientID: "pub", Logger: quietLogger, NoReconnect: true})
	require.NoError(t, err)
	defer pub.Close()
	type sent struct {
		r   *protocol.SendMessageResult
		err error
	}
	result := make(chan sent, 1)
	go func() {
		r, err := pub.SendMessage(context.Background(), "jobs:1", map[string]string{"type": "job"}, nil)
		result <- sent{r, err}
	}()
	<-arrived

	require.NoError(t, d.cmd.Process.Signal(syscall.SIGTERM))
	get := func(path string) (int, string) {
		resp, err := http.Get(d.http + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(body))
	}
	require.Eventually(t, func() bool {
		code, _ := get("/readyz")
		return code == http.StatusServiceUnavailable
	}, 20*time.Second, 20*time.Millisecond, "/readyz to say draining")
	code, body := get("/readyz")
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Equal(t, "draining", body)
	code, body = get("/healthz")
	assert.Equal(t, http.StatusOK, code, "healthz while draining: %s", body)
	_, err = bustest.DialWS(d.url, "")
	assert.Error(t, err, "a new peer while draining")
	// An HTTP publish is refused too, and told when to come back.
	status, header, answer := bustest.Post(t, d.http+"/v1/messages", `{"topic":"jobs:2","payload":{"type":"job"}}`, nil)
	assert.Equal(t, http.StatusServiceUnavailable, status, "POST /v1/messages while draining: %s", answer)
	assert.Contains(t, string(answer), `"code":-32007`)
	assert.NotEmpty(t, header.Get("Retry-After"), "Retry-After of a 503")

	close(release)
	select {
	case got := <-result:
		require.NoError(t, got.err, "the waiting publisher's result")
		require.Len(t, got.r.Acks, 1)
		assert.True(t, got.r.Acks[0].Processed)
		assert.Equal(t, "done late", got.r.Acks[0].Message)
	case <-time.After(20 * time.Second):
		t.Fatal("the waiting publisher got no answer")
	}
	done := make(chan error, 1)
	go func() { done <- d.cmd.Wait() }()
	select {
	case err := <-done:
		assert.NoError(t, err, "bub serve: %s", d.stderr)
	case <-time.After(20 * time.Second):
		t.Fatalf("bub serve did not stop: %s", d.stderr)
	}
}
