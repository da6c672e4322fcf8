package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/internal/checkfor"
	"github.com/bub-bus/bub/peer"
	"github.com/bub-bus/bub/protocol"
)

// startListen runs bub listen until the test cancels it, and returns its
// output buffers and a channel with its exit status.
func startListen(t *testing.T, ctx context.Context, args ...string) (stdout, stderr *lockedBuffer, exit <-chan int) {
	stdout, stderr = &lockedBuffer{}, &lockedBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, stdio{in: strings.NewReader(""), out: stdout, err: stderr}, append([]string{"listen"}, args...))
	}()
	return stdout, stderr, done
}

// sendUntil publishes until the result satisfies done, as a listener
// subscribes a moment after it starts.
func sendUntil(t *testing.T, c *peer.Conn, topic string, done func(*protocol.SendMessageResult) bool) *protocol.SendMessageResult {
	t.Helper()
	var r *protocol.SendMessageResult
	checkfor.Check(t, 5*time.Second, func() (err error) {
		r, err = c.SendMessage(t.Context(), topic, map[string]string{"type": "plaintext_message", "text": "one"}, nil)
		require.NoError(t, err)
		if !done(r) {
			return fmt.Errorf("no wanted result on %s; last %+v", topic, r)
		}
		return nil
	})
	return r
}

func routed(r *protocol.SendMessageResult) bool { return r.Success }

func TestListen(t *testing.T) {
	url := startCLIBus(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stdout, stderr, exit := startListen(t, ctx, "--bus-url", url, "--topic", "inbound:*", "--client-id", "listener")

	pub, err := peer.Dial(t.Context(), url, &peer.Options{ClientID: "bridge", Logger: quietLogger})
	require.NoError(t, err)
	defer pub.Close()
	first := sendUntil(t, pub, "inbound:1", routed)
	assert.Equal(t, []protocol.Ack{{ClientID: "listener", Subscription: "inbound:*", Processed: true}}, first.Acks)
	second, err := pub.SendMessage(t.Context(), "inbound:2", map[string]string{"type": "plaintext_message", "text": "two"}, &peer.SendOptions{Meta: map[string]string{"traceparent": "00-1-2-01"}})
	require.NoError(t, err)

	cancel()
	select {
	case code := <-exit:
		assert.Equal(t, 0, code, "stderr: %s", stderr.String())
	case <-time.After(10 * time.Second):
		t.Fatal("listen did not stop when its context was cancelled")
	}

	// Only JSON lines on stdout, one per delivery, ready for jq.
	lines := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
	require.Len(t, lines, 2, "stdout: %q", stdout.String())
	var got []map[string]any
	for _, line := range lines {
		var v map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &v), line)
		got = append(got, v)
	}
	assert.JSONEq(t, `{"topic":"inbound:1","subscription":"inbound:*","messageId":"`+first.MessageID+`","from":"bridge","attempt":1,"payload":{"type":"plaintext_message","text":"one"}}`, lines[0])
	assert.JSONEq(t, `{"topic":"inbound:2","subscription":"inbound:*","messageId":"`+second.MessageID+`","from":"bridge","attempt":1,"payload":{"type":"plaintext_message","text":"two"},"meta":{"traceparent":"00-1-2-01"}}`, lines[1])
}

// --policy reaches the bus: under continueAll the message goes on to an
// older subscriber after the listener processed it.
func TestListenPolicy(t *testing.T) {
	url := startCLIBus(t)
	_, _ = bustest.Collect(t, url, "older", "audit:")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	_, _, exit := startListen(t, ctx, "--bus-url", url, "--topic", "audit:*", "--policy", "continueAll", "--client-id", "listener")

	pub, err := peer.Dial(t.Context(), url, &peer.Options{ClientID: "pub", Logger: quietLogger})
	require.NoError(t, err)
	defer pub.Close()
	// Until the listener has subscribed, only the older subscriber answers.
	r := sendUntil(t, pub, "audit:1", func(r *protocol.SendMessageResult) bool { return len(r.Acks) == 2 })
	require.Len(t, r.Acks, 2)
	assert.Equal(t, "listener", r.Acks[0].ClientID)
	assert.Equal(t, "older", r.Acks[1].ClientID)
	cancel()
	select {
	case code := <-exit:
		assert.Equal(t, 0, code)
	case <-time.After(10 * time.Second):
		t.Fatal("listen did not stop when its context was cancelled")
	}
}

func TestListenErrors(t *testing.T) {
	url := startCLIBus(t)
	dead := stoppedBusURL(t)
	runErrorCases(t, "listen", url, []errorCase{
		{"no pattern", nil, 2, "no pattern"},
		{"unknown policy", []string{"--topic", "t", "--policy", "sometimes"}, 1, `policy "sometimes"`},
		{"bad pattern", []string{"--topic", "a b"}, 1, "invalid params"},
		{"bus unreachable", []string{"--bus-url", dead, "--topic", "t"}, 1, "dial " + dead},
	})
}

// A listener whose clientId another connection takes over stops with an
// error instead of fighting for the identity.
func TestListenTakenOver(t *testing.T) {
	url := startCLIBus(t)
	_, stderr, exit := startListen(t, t.Context(), "--bus-url", url, "--topic", "t", "--client-id", "same")
	pub, err := peer.Dial(t.Context(), url, &peer.Options{ClientID: "pub", Logger: quietLogger})
	require.NoError(t, err)
	defer pub.Close()
	sendUntil(t, pub, "t", routed)
	// The bus routes to the subscription before its answer reaches the
	// listener; a takeover in between would fail the subscribe instead.
	require.Eventually(t, func() bool { return strings.Contains(stderr.String(), "subscribed to") }, 10*time.Second, 5*time.Millisecond)

	newer, err := peer.Dial(t.Context(), url, &peer.Options{ClientID: "same", Logger: quietLogger})
	require.NoError(t, err)
	defer newer.Close()
	select {
	case code := <-exit:
		assert.Equal(t, 1, code)
		assert.Contains(t, stderr.String(), "taken over")
	case <-time.After(10 * time.Second):
		t.Fatal("listen kept running after a takeover")
	}
}

// TestListenReply: --reply makes bub listen answer every delivery as a
// subscriber that retries or refuses would, so that retries and the
// dead-letter queue can be tried from a shell; the line on stderr comes
// once the subscription is in place, so a publish right after it is
// delivered.
func TestListenReply(t *testing.T) {
	srv := bustest.Start(t, &bus.Options{MaxAttempts: 2, Logger: quietLogger})
	pub, err := peer.Dial(t.Context(), srv.URL, &peer.Options{ClientID: "pub", Logger: quietLogger})
	require.NoError(t, err)
	defer pub.Close()
	send := func(topic string) *protocol.SendMessageResult {
		r, err := pub.SendMessage(t.Context(), topic, map[string]string{"type": "job"}, nil)
		require.NoError(t, err)
		return r
	}
	subscribed := func(stderr *lockedBuffer, want string) {
		require.Eventually(t, func() bool { return strings.Contains(stderr.String(), "subscribed to") }, 20*time.Second, 20*time.Millisecond, "listen's subscribed line")
		line := stderr.String()
		assert.Equal(t, 1, strings.Count(line, "\n"), line)
		assert.Contains(t, line, want)
	}

	_, stderr, _ := startListen(t, t.Context(), "--bus-url", srv.URL, "--topic", "jobs:*", "--client-id", "worker", "--reply", "retry", "--retry-seconds", "0.05")
	subscribed(stderr, `bub listen: subscribed to "jobs:*" as worker; each delivery is a line on stdout, answered should_retry: true, retry_seconds: 0.05`)
	r := send("jobs:1")
	require.Len(t, r.Acks, 1, "the first publish after the line reaches the listener")
	assert.True(t, r.Acks[0].Retrying)
	assert.Equal(t, "retry asked by bub listen --reply retry", r.Acks[0].Message)
	var dead protocol.DLQListResult
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, pub.Call(t.Context(), protocol.MethodDLQList, protocol.DLQListParams{}, &dead))
		require.Len(c, dead.Entries, 1, "the retried message in the dead-letter queue")
	}, 20*time.Second, 20*time.Millisecond)
	assert.Equal(t, protocol.ReasonMaxRetries, dead.Entries[0].Reason)
	assert.Equal(t, r.MessageID, dead.Entries[0].MessageID)

	_, stderr, _ = startListen(t, t.Context(), "--bus-url", srv.URL, "--topic", "tasks:*", "--client-id", "refuser", "--reply", "reject")
	subscribed(stderr, "answered reject: true")
	r = send("tasks:1")
	require.Len(t, r.Acks, 1)
	assert.False(t, r.Acks[0].Processed)
	assert.False(t, r.Acks[0].Retrying)
	assert.Equal(t, "rejected by bub listen --reply reject", r.Acks[0].Message)
	// A final refusal on the first attempt: dead-lettered at once, not
	// handed back to the publisher alone.
	require.NoError(t, pub.Call(t.Context(), protocol.MethodDLQList, protocol.DLQListParams{DLQFilter: protocol.DLQFilter{Topic: "tasks:*"}}, &dead))
	require.Len(t, dead.Entries, 1)
	assert.Equal(t, protocol.ReasonRejected, dead.Entries[0].Reason)
	assert.Equal(t, r.MessageID, dead.Entries[0].MessageID)
}

func TestListenReplyUsage(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--reply", "maybe"}, `--reply "maybe": want processed, retry or reject`},
		{[]string{"--retry-seconds", "2"}, "--retry-seconds goes with --reply retry, not --reply processed"},
		{[]string{"--reply", "reject", "--retry-seconds", "2"}, "not --reply reject"},
		{[]string{"--reply", "retry", "--retry-seconds", "-1"}, "--retry-seconds -1: want 0 (the bus's backoff) to 86400 (a day"},
		{[]string{"--reply", "retry", "--retry-seconds", "1e300"}, "--retry-seconds 1e+300: want 0 (the bus's backoff) to 86400 (a day"},
		{[]string{"--reply", "retry", "--retry-seconds", "86401"}, "--retry-seconds 86401: want 0"},
		{[]string{"--reply", "retry", "--retry-seconds", "NaN"}, "--retry-seconds NaN: want 0"},
		{[]string{"--reply", "retry", "--retry-seconds", "+Inf"}, "--retry-seconds +Inf: want 0"},
	} {
		code, _, stderr := runBub(t, "", append([]string{"listen", "--topic", "t"}, tt.args...)...)
		assert.Equal(t, 2, code, "%v", tt.args)
		oneLine(t, stderr, tt.want)
	}
}

// TestListenRefusedCredentialExits: a bub listen left running while the
// bus restarts with auth used to log "reconnect failed ... unauthorized"
// every few seconds for ever. The refusal is final: it says why and how
// to go on, and exits 1.
func TestListenRefusedCredentialExits(t *testing.T) {
	t.Parallel()
	dir, addr := t.TempDir(), freeAddr(t)
	d := startBusAt(t, addr, filepath.Join(dir, "data"))
	listen, _, listenErr := startListenProcess(t, []string{"BUB_BUS_URL=" + d.url}, "inbound:*")
	checkfor.Check(t, 20*time.Second, func() error {
		if !strings.Contains(listenErr.String(), "subscribed to") {
			return fmt.Errorf("bub listen has not subscribed: %q", listenErr)
		}
		return nil
	})
	exited := make(chan error, 1)
	go func() { exited <- listen.Wait() }()

	config := writeFile(t, dir, "bus.yaml", "auth:\n  identities:\n    - name: ops\n      token_sha256: \""+sha256Hex("ops-token-0123456789abcdef")+"\"\n      client_ids: [\"cli-*\"]\n      admin: true\n")
	d.stop(t)
	startBusAt(t, addr, filepath.Join(dir, "data"), "--config", config)
	select {
	case err := <-exited:
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, "stderr: %s", listenErr)
		assert.Equal(t, 1, exit.ExitCode())
	case <-time.After(30 * time.Second):
		t.Fatalf("bub listen still runs against a bus that refuses its credential: %s", listenErr)
	}
	for _, want := range []string{"bub listen: ", "refused the credential", "BUB_TOKEN", "--retry-unauthorized"} {
		assert.Contains(t, listenErr.String(), want)
	}
}
