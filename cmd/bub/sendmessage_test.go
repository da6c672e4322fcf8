package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/peer"
	"github.com/bub-bus/bub/protocol"
)

var quietLogger = slog.New(slog.DiscardHandler)

// startCLIBus starts a bus in the process and returns its URL, with the
// BUB_* variables the client commands read cleared for the test.
func startCLIBus(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"BUB_BUS_URL", "BUB_TOPIC", "BUB_DEFAULT_TOPIC", "BUB_AGENT_ID", "BUB_CLIENT_ID", "BUB_PAYLOAD", "BUB_TIMEOUT", "BUB_POLICY"} {
		t.Setenv(name, "") // restores the variable after the test
		os.Unsetenv(name)
	}
	srv, err := bus.New(&bus.Options{Logger: quietLogger})
	require.NoError(t, err)
	hs := httptest.NewServer(srv)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		hs.Close()
	})
	return "ws://" + strings.TrimPrefix(hs.URL, "http://") + "/"
}

// lockedBuffer is a bytes.Buffer that a command may write while the test
// reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// runCLI runs bub with args in the process.
func runCLI(ctx context.Context, stdin string, args ...string) (code int, stdout, stderr string) {
	var out, errOut lockedBuffer
	code = run(ctx, stdio{in: strings.NewReader(stdin), out: &out, err: &errOut}, args)
	return code, out.String(), errOut.String()
}

// oneLine checks that stderr is one line that says want.
func oneLine(t *testing.T, stderr, want string) {
	t.Helper()
	assert.Equal(t, 1, strings.Count(stderr, "\n"), "stderr: %q", stderr)
	assert.True(t, strings.HasPrefix(stderr, "bub"), "stderr: %q", stderr)
	assert.Contains(t, stderr, want)
}

func TestSendMessage(t *testing.T) {
	url := startCLIBus(t)
	_, got := bustest.Collect(t, url, "agent", "agent:*")
	dir := t.TempDir()
	file := filepath.Join(dir, "task.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"type":"task_request","task_id":"t-1"}`), 0o600))

	for _, tt := range []struct {
		name    string
		stdin   string
		payload string
	}{
		{"inline", "", `{"type":"task_request","task_id":"t-1"}`},
		{"from a file", "", "@" + file},
		{"from stdin", `{"type":"task_request","task_id":"t-1"}`, "-"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t.Context(), tt.stdin, "send-message", "--bus-url", url, "--client-id", "tool", "--topic", "agent:x", "--payload", tt.payload)
			require.Equal(t, 0, code, "stderr: %s", stderr)
			assert.Empty(t, stderr)
			assert.Equal(t, 1, strings.Count(stdout, "\n"), "one JSON line: %q", stdout)
			var result protocol.SendMessageResult
			require.NoError(t, json.Unmarshal([]byte(stdout), &result))
			assert.True(t, result.Success)
			assert.Equal(t, []protocol.Ack{{ClientID: "agent", Subscription: "agent:*", Processed: true, Message: "ok"}}, result.Acks)

			d := <-got
			assert.Equal(t, "tool", d.From)
			assert.Equal(t, result.MessageID, d.MessageID)
			assert.JSONEq(t, `{"type":"task_request","task_id":"t-1"}`, string(d.Payload))
		})
	}
}

// With no flags but the payload, the agent environment decides: the topic
// is BUB_DEFAULT_TOPIC, the sender BUB_AGENT_ID, the bus BUB_BUS_URL.
func TestSendMessageFromAgentEnvironment(t *testing.T) {
	url := startCLIBus(t)
	_, got := bustest.Collect(t, url, "bridge", "outbound:*")
	t.Setenv("BUB_BUS_URL", url)
	t.Setenv("BUB_DEFAULT_TOPIC", "outbound:42")
	t.Setenv("BUB_AGENT_ID", "agent-abc")
	code, _, stderr := runCLI(t.Context(), "", "send-message", "--payload", `{"type":"plaintext_message","text":"hi"}`)
	require.Equal(t, 0, code, "stderr: %s", stderr)
	d := <-got
	assert.Equal(t, "outbound:42", d.Topic)
	assert.Equal(t, "agent-abc", d.From)

	// Without BUB_AGENT_ID the sender gets a throwaway id.
	os.Unsetenv("BUB_AGENT_ID")
	code, _, stderr = runCLI(t.Context(), "", "send-message", "--payload", `{"type":"plaintext_message"}`)
	require.Equal(t, 0, code, "stderr: %s", stderr)
	d = <-got
	assert.True(t, strings.HasPrefix(d.From, "cli-"), d.From)
}

func TestSendMessageNoSubscriber(t *testing.T) {
	url := startCLIBus(t)
	code, stdout, stderr := runCLI(t.Context(), "", "send-message", "--bus-url", url, "--topic", "nobody:here", "--payload", `{"type":"x"}`)
	assert.Equal(t, 1, code)
	var result protocol.SendMessageResult
	require.NoError(t, json.Unmarshal([]byte(stdout), &result), "the result is printed even so")
	assert.False(t, result.Success)
	assert.Equal(t, protocol.ReasonNoSubscribers, result.Reason)
	oneLine(t, stderr, `no subscriber for "nobody:here"`)
}

func TestSendMessageErrors(t *testing.T) {
	url := startCLIBus(t)
	dead := stoppedBusURL(t)
	runErrorCases(t, "send-message", url, []errorCase{
		{"bus unreachable", []string{"--bus-url", dead, "--topic", "t", "--payload", `{"type":"x"}`}, 1, "dial " + dead},
		{"bad JSON", []string{"--topic", "t", "--payload", `{"type":`}, 1, "not valid JSON"},
		{"no type", []string{"--topic", "t", "--payload", `{"text":"hi"}`}, 1, "payload.type is required"},
		{"not an object", []string{"--topic", "t", "--payload", `"hi"`}, 1, "JSON object"},
		{"missing file", []string{"--topic", "t", "--payload", "@/nonexistent/task.json"}, 1, "/nonexistent/task.json"},
		{"refused by the bus", []string{"--topic", "a:*", "--payload", `{"type":"x"}`}, 1, "invalid params"},
		{"no topic", []string{"--payload", `{"type":"x"}`}, 2, "no topic"},
		{"no payload", []string{"--topic", "t"}, 2, "no payload"},
		{"stray argument", []string{"--topic", "t", `{"type":"x"}`}, 2, "unexpected argument"},
	})
}

// errorCase is a command line that must fail with one line on stderr that
// says want, and nothing on stdout.
type errorCase struct {
	name string
	args []string
	code int
	want string
}

func runErrorCases(t *testing.T, command, url string, cases []errorCase) {
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{command, "--bus-url", url}, tt.args...)
			code, stdout, stderr := runCLI(t.Context(), "", args...)
			assert.Equal(t, tt.code, code)
			assert.Empty(t, stdout)
			oneLine(t, stderr, tt.want)
		})
	}
}

// stoppedBusURL returns the URL of a bus that has stopped: nothing
// listens there.
func stoppedBusURL(t *testing.T) string {
	hs := httptest.NewServer(nil)
	url := "ws://" + strings.TrimPrefix(hs.URL, "http://") + "/"
	hs.Close()
	return url
}

// The default wait must outlast the bus's own delivery timeout: it used
// to equal it, so a slow subscriber made send-message fail while the bus
// was still delivering.
func TestAnswerTimeoutOutlastsTheBus(t *testing.T) {
	for _, ms := range []int64{0, 1000, 30000, 120000} {
		bus := time.Duration(ms) * time.Millisecond
		if ms == 0 {
			bus = 30 * time.Second // a bus that does not say: its default
		}
		if got := answerTimeout(protocol.Limits{DeliveryTimeoutMs: ms}); got <= bus {
			t.Errorf("delivery timeout %s: send-message waits %s", bus, got)
		}
	}
}

// TestSendMessageSlowSubscriber runs the real binary against bub serve
// with a subscriber slower than the bus's delivery timeout: by default
// send-message waits for the bus's answer and prints it (the ack with
// retrying: true); with a --timeout shorter than the bus's, it says the
// outcome is unknown and where to look, instead of "deadline exceeded".
func TestSendMessageSlowSubscriber(t *testing.T) {
	t.Parallel()
	d := startBus(t, t.TempDir(), "--delivery-timeout", "1s", "--retry-base-delay", "1m")
	slow, err := peer.Dial(t.Context(), d.url, &peer.Options{ClientID: "slow", Logger: quietLogger, HandlerTimeout: 3 * time.Second})
	require.NoError(t, err)
	defer slow.Close()
	require.NoError(t, slow.Subscribe(t.Context(), "work:*", func(ctx context.Context, _ *peer.Delivery) (peer.Result, error) {
		<-ctx.Done()
		return peer.Result{Processed: true}, nil
	}, nil))
	env := []string{"BUB_BUS_URL=" + d.url}

	out, errOut, code := bub(t, env, "", "send-message", "--topic", "work:1", "--payload", `{"type":"job"}`)
	assert.Equal(t, 0, code, "stderr: %s", errOut)
	var result protocol.SendMessageResult
	require.NoError(t, json.Unmarshal([]byte(out), &result), "stdout: %q", out)
	require.Len(t, result.Acks, 1)
	assert.True(t, result.Acks[0].Retrying, "ack %+v", result.Acks[0])
	assert.Contains(t, errOut, "bub send-message: retrying: slow did not process message "+result.MessageID)

	_, errOut, code = bub(t, env, "", "send-message", "--topic", "work:2", "--payload", `{"type":"job"}`, "--timeout", "300ms")
	assert.Equal(t, 1, code)
	oneLine(t, errOut, "outcome is unknown")
	for _, want := range []string{"300ms", `"work:2"`, "bub dlq list --topic work:2", "bub tail --topic work:2", "bub trace"} {
		assert.Contains(t, errOut, want)
	}
	assert.NotContains(t, errOut, "deadline exceeded")
}

// TestSendMessageRejected: a message the subscriber rejects is accepted
// and dead-lettered at once; the bus's result says "success": true, and
// send-message used to exit 0 with nothing on stderr. It exits
// exitDeadLettered, names the dead letter and the commands that show it,
// and still prints the result on stdout for scripts.
func TestSendMessageRejected(t *testing.T) {
	t.Parallel()
	d := startBus(t, t.TempDir())
	no, err := peer.Dial(t.Context(), d.url, &peer.Options{ClientID: "judge", Logger: quietLogger})
	require.NoError(t, err)
	defer no.Close()
	require.NoError(t, no.Subscribe(t.Context(), "claims:*", func(context.Context, *peer.Delivery) (peer.Result, error) {
		return peer.Result{Reject: true, Message: "not a claim"}, nil
	}, nil))

	out, errOut, code := bub(t, []string{"BUB_BUS_URL=" + d.url}, "", "send-message", "--topic", "claims:1", "--payload", `{"type":"claim"}`)
	assert.Equal(t, exitDeadLettered, code, "stderr: %s", errOut)
	var result protocol.SendMessageResult
	require.NoError(t, json.Unmarshal([]byte(out), &result), "the result is on stdout even so: %q", out)
	require.Len(t, result.Acks, 1)
	dl := result.Acks[0].DeadLetter
	require.NotEmpty(t, dl, "ack %+v", result.Acks[0])
	oneLine(t, errOut, "bub send-message: dead-lettered: judge refused message "+result.MessageID+" (not a claim)")
	for _, want := range []string{"bub dlq show " + dl, "bub trace " + result.MessageID} {
		assert.Contains(t, errOut, want)
	}

	// The id named is one bub dlq show finds.
	out, errOut, code = bub(t, []string{"BUB_BUS_URL=" + d.url}, "", "dlq", "show", dl, "--json")
	require.Equal(t, 0, code, "stderr: %s", errOut)
	assert.Contains(t, out, result.MessageID)
}

// An oversized payload is refused before it is sent, with the limit
// named; it used to say only "connection lost before the answer".
func TestSendMessageTooBig(t *testing.T) {
	t.Parallel()
	d := startBus(t, t.TempDir(), "--max-message-bytes", "2048")
	payload := `{"type":"x","pad":"` + strings.Repeat("x", 4096) + `"}`
	_, errOut, code := bub(t, []string{"BUB_BUS_URL=" + d.url}, "", "send-message", "--topic", "t", "--payload", payload)
	assert.Equal(t, 1, code)
	oneLine(t, errOut, "over the bus's limit of 2048 bytes")
	assert.Contains(t, errOut, "--max-message-bytes")
	assert.NotContains(t, errOut, "connection lost")
}

// --bus-url takes the nodes of a cluster, comma-separated: a command
// reaches the first that answers, and a bad URL in the list is named
// before any is dialed.
func TestSendMessageToSeveralBusURLs(t *testing.T) {
	url := startCLIBus(t)
	dead := stoppedBusURL(t)
	_, got := bustest.Collect(t, url, "agent", "agent:*")
	code, stdout, stderr := runCLI(t.Context(), "", "send-message", "--bus-url", dead+","+url, "--client-id", "tool", "--topic", "agent:x", "--payload", `{"type":"x"}`)
	require.Equal(t, 0, code, "stderr: %s", stderr)
	assert.Contains(t, stdout, `"success":true`)
	assert.Equal(t, "tool", (<-got).From)

	// The same from the environment, with spaces after the comma.
	t.Setenv("BUB_BUS_URL", dead+", "+url)
	code, _, stderr = runCLI(t.Context(), "", "send-message", "--topic", "agent:x", "--payload", `{"type":"x"}`)
	require.Equal(t, 0, code, "stderr: %s", stderr)
	<-got

	runErrorCases(t, "send-message", dead+","+url, []errorCase{
		{"a URL without a scheme", []string{"--bus-url", url + ",127.0.0.1:7892", "--topic", "t", "--payload", `{"type":"x"}`},
			1, `bus URL 2 of 2 ("127.0.0.1:7892") in "` + url + `,127.0.0.1:7892" (--bus-url or BUB_BUS_URL) is not a WebSocket URL; did you mean ws://127.0.0.1:7892/?`},
		{"an empty URL", []string{"--bus-url", url + ",", "--topic", "t", "--payload", `{"type":"x"}`}, 1, `bus URL 2 of 2 ("") in "` + url + `," (--bus-url or BUB_BUS_URL) is empty`},
		{"none answers", []string{"--bus-url", dead + "," + dead, "--topic", "t", "--payload", `{"type":"x"}`}, 1, "dial " + dead},
	})
}

// TestSendMessageInterrupted: Ctrl-C while send-message waits for the
// bus's answer says the outcome is unknown and where to look, as
// --timeout does, not "context canceled".
func TestSendMessageInterrupted(t *testing.T) {
	url := startCLIBus(t)
	arrived := make(chan struct{}, 1)
	slow, err := peer.Dial(t.Context(), url, &peer.Options{ClientID: "slow", Logger: quietLogger})
	require.NoError(t, err)
	defer slow.Close()
	require.NoError(t, slow.Subscribe(t.Context(), "work:*", func(ctx context.Context, _ *peer.Delivery) (peer.Result, error) {
		arrived <- struct{}{}
		<-ctx.Done()
		return peer.Result{}, ctx.Err()
	}, nil))
	ctx, interrupt := context.WithCancel(t.Context())
	go func() {
		<-arrived
		interrupt()
	}()
	code, _, stderr := runCLI(ctx, "", "send-message", "--bus-url", url, "--topic", "work:1", "--payload", `{"type":"job"}`)
	assert.Equal(t, 1, code)
	oneLine(t, stderr, "interrupted before the bus answered, so the outcome is unknown")
	assert.Contains(t, stderr, "bub dlq list --topic work:1")
	assert.NotContains(t, stderr, "context canceled")
}
