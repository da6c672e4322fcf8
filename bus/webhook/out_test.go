package webhook_test

import (
	"context"
	"crypto/hmac"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/bus/webhook"
	"github.com/bub-bus/bub/protocol"
)

// receiver is a webhook receiver that verifies Bub-Signature as
// docs/PROTOCOL.md tells receivers to, and answers each message's
// attempts with the statuses its script gives.
type receiver struct {
	t      *testing.T
	secret string
	srv    *httptest.Server

	mu     sync.Mutex
	script map[string][]int // by payload type: the statuses, one per attempt
	got    chan protocol.ProcessMessageParams
}

func newReceiver(t *testing.T, secret string, script map[string][]int) *receiver {
	r := &receiver{t: t, secret: secret, script: script, got: make(chan protocol.ProcessMessageParams, 64)}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	sig := req.Header.Get(webhook.HeaderSignature)
	ts, v1, ok := strings.Cut(sig, ",v1=")
	ts, tok := strings.CutPrefix(ts, "t=")
	if !ok || !tok || !hmac.Equal([]byte(v1), []byte(bustest.HMACHex(r.secret, ts+"."+string(body)))) {
		r.t.Errorf("delivery with signature %q does not verify over %s", sig, body)
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	var p protocol.ProcessMessageParams
	if err := json.Unmarshal(body, &p); err != nil {
		r.t.Errorf("delivery body %s: %v", body, err)
	}
	var payload struct{ Type string }
	_ = json.Unmarshal(p.Payload, &payload)
	r.mu.Lock()
	status := http.StatusOK
	if s := r.script[payload.Type]; len(s) > 0 {
		status, r.script[payload.Type] = s[0], s[1:]
	}
	r.mu.Unlock()
	r.got <- p
	w.WriteHeader(status)
}

// TestWebhookOut checks a subscription whose subscriber is a URL: each
// delivery is POSTed signed; 500 and 429 are retried until a 200, 400
// is dead-lettered at once, and a 200 at once is processed.
func TestWebhookOut(t *testing.T) {
	rc := newReceiver(t, "out-secret", map[string][]int{"flaky": {500, 429, 200}, "bad": {400}})
	st := store.OpenMemory()
	srv := start(t, &bus.Options{Store: st, RetryBaseDelay: 10 * time.Millisecond}, webhook.Options{
		AllowPrivate:  true,
		Subscriptions: []webhook.Subscription{{Name: "audit", URL: rc.srv.URL + "/hook", Pattern: "orders:*", Secret: []byte("out-secret")}},
	})
	pub := bustest.Dial(t, srv.URL)
	pub.Initialize("shop")
	ok := pub.Publish("orders:1", "ok")
	require.Len(t, ok.Acks, 1)
	require.True(t, ok.Acks[0].Processed, "a 200 is processed: %+v", ok.Acks[0])
	require.Equal(t, "bub-webhook-audit", ok.Acks[0].ClientID)

	flaky := pub.Publish("orders:2", "flaky")
	require.True(t, flaky.Acks[0].Retrying, "a 500 is retried: %+v", flaky.Acks[0])
	bad := pub.Publish("orders:3", "bad")
	require.NotEmpty(t, bad.Acks[0].DeadLetter, "a 400 is dead-lettered at once: %+v", bad.Acks[0])

	attempts := map[string][]int{}
	for range 5 { // ok, flaky ×3, bad
		p := <-rc.got
		var payload struct{ Type string }
		_ = json.Unmarshal(p.Payload, &payload)
		attempts[payload.Type] = append(attempts[payload.Type], p.Attempt)
		require.Equal(t, "shop", p.From)
		require.Equal(t, "orders:*", p.Subscription)
	}
	require.Equal(t, map[string][]int{"ok": {1}, "flaky": {1, 2, 3}, "bad": {1}}, attempts)
	require.Eventually(t, func() bool {
		n, _, err := st.PendingUsage("")
		return err == nil && n.Entries == 0
	}, bustest.Timeout, 10*time.Millisecond, "the flaky message's retry is settled")
	dead, _, err := st.ListDeadLetters(store.Filter{}, "", 10)
	require.NoError(t, err)
	require.Len(t, dead, 1)
	require.Equal(t, bad.MessageID, dead[0].Message.ID)
	require.Equal(t, protocol.ReasonRejected, dead[0].Reason)
	require.Contains(t, dead[0].Attempts[0].Error, "400")
	require.Equal(t, 1.0, metric(t, srv, "bub_webhook_calls_total", "429"))
	require.Equal(t, 1.0, metric(t, srv, "bub_webhook_calls_total", "5xx"))
	require.Equal(t, 2.0, metric(t, srv, "bub_webhook_calls_total", "2xx"))
}

// TestWebhookOutRefusesPrivate checks the SSRF rule: without
// webhook.Options.AllowPrivate, a URL on loopback, by address or by a name that
// resolves there, is not called, and the message is dead-lettered with
// the reason.
func TestWebhookOutRefusesPrivate(t *testing.T) {
	rc := newReceiver(t, "k", nil)
	port := rc.srv.URL[strings.LastIndex(rc.srv.URL, ":"):]
	st := store.OpenMemory()
	srv := start(t, &bus.Options{Store: st}, webhook.Options{Subscriptions: []webhook.Subscription{
		{Name: "ip", URL: rc.srv.URL, Pattern: "a", Secret: []byte("k")},
		{Name: "name", URL: "http://localhost" + port, Pattern: "b", Secret: []byte("k")},
	}})
	pub := bustest.Dial(t, srv.URL)
	pub.Initialize("p")
	for _, topic := range []string{"a", "b"} {
		r := pub.Publish(topic, "t")
		require.NotEmpty(t, r.Acks[0].DeadLetter, "%s: %+v", topic, r.Acks[0])
		require.Contains(t, r.Acks[0].Message, "--webhook-allow-private")
	}
	select {
	case p := <-rc.got:
		t.Fatalf("the receiver on loopback was called: %+v", p)
	default:
	}
	require.Equal(t, 2.0, metric(t, srv, "bub_webhook_calls_total", "refused_address"))
}

// TestWebhookSubscriptionRefused checks that a bad webhook subscription
// stops the bus from starting, naming what is wrong.
func TestWebhookSubscriptionRefused(t *testing.T) {
	for _, tt := range []struct {
		name string
		sub  webhook.Subscription
		want string
	}{
		{"no secret", webhook.Subscription{Name: "a", URL: "https://example.com/", Pattern: "x"}, "secret is required"},
		{"not http", webhook.Subscription{Name: "a", URL: "file:///etc/passwd", Pattern: "x", Secret: []byte("k")}, "http://"},
		{"password in the URL", webhook.Subscription{Name: "a", URL: "https://u:p@example.com/", Pattern: "x", Secret: []byte("k")}, "user:password"},
		{"bad pattern", webhook.Subscription{Name: "a", URL: "https://example.com/", Pattern: "a b", Secret: []byte("k")}, "pattern"},
		{"bad name", webhook.Subscription{Name: "a b", URL: "https://example.com/", Pattern: "x", Secret: []byte("k")}, "name"},
		{"bad policy", webhook.Subscription{Name: "a", URL: "https://example.com/", Pattern: "x", Secret: []byte("k"), Policy: "sometimes"}, "policy"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := bus.New(&bus.Options{Extensions: []bus.Extension{webhook.New(webhook.Options{Subscriptions: []webhook.Subscription{tt.sub}})}})
			require.ErrorContains(t, err, tt.want)
			if strings.Contains(tt.sub.URL, "u:p@") {
				require.NotContains(t, err.Error(), "u:p@")
			}
		})
	}
}

// TestWebhookAddRefusesInsideAddress: a bus without webhook.Options.AllowPrivate
// refuses webhook.add of a URL it would never call, naming the flag that
// allows it; it used to accept it and dead-letter every delivery.
func TestWebhookAddRefusesInsideAddress(t *testing.T) {
	t.Parallel()
	st := store.OpenMemory()
	srv := start(t, &bus.Options{Store: st}, webhook.Options{Store: st})
	admin := bustest.Dial(t, srv.URL)
	admin.Initialize("ops")
	for _, u := range []string{"http://127.0.0.1:18319/hook", "http://[::1]/x", "https://10.1.2.3/", "http://localhost:9/"} {
		resp := admin.Call(protocol.MethodWebhookAdd, protocol.WebhookAddParams{Name: "rx", URL: u, Pattern: "x:*", Secret: "k"})
		require.NotNil(t, resp.Error, "webhook.add %s was taken", u)
		require.EqualValues(t, protocol.CodeInvalidParams, resp.Error.Code)
		require.Contains(t, resp.Error.Message, "--webhook-allow-private", u)
		require.Contains(t, resp.Error.Message, "loopback, private or link-local", u)
	}
	var list protocol.WebhookListResult
	admin.MustCall(protocol.MethodWebhookList, map[string]any{}, &list)
	require.Empty(t, list.Webhooks)
}

// TestWebhookAdminMethods makes, lists and removes a webhook
// subscription with webhook.*: what webhook.add makes delivers at once,
// is kept across a restart, and is gone after webhook.remove; one of
// the configuration is listed but not removable, and the secret is
// never shown.
func TestWebhookAdminMethods(t *testing.T) {
	rc := newReceiver(t, "admin-secret", nil)
	st := store.OpenMemory()
	opts := &bus.Options{Store: st}
	hooks := webhook.Options{Store: st, AllowPrivate: true, Subscriptions: []webhook.Subscription{
		{Name: "fixed", URL: rc.srv.URL, Pattern: "fixed:*", Secret: []byte("admin-secret")},
	}}
	first := start(t, opts, hooks)
	admin := bustest.Dial(t, first.URL)
	admin.Initialize("ops")
	var added protocol.Webhook
	admin.MustCall(protocol.MethodWebhookAdd, protocol.WebhookAddParams{Name: "made", URL: rc.srv.URL + "/x", Pattern: "made:*", Secret: "admin-secret"}, &added)
	require.Equal(t, "bub-webhook-made", added.ClientID)
	r := admin.Publish("made:1", "t")
	require.True(t, r.Acks[0].Processed, "%+v", r.Acks)
	<-rc.got

	for _, bad := range []protocol.WebhookAddParams{
		{Name: "made", URL: rc.srv.URL, Pattern: "x", Secret: "k"},  // taken
		{Name: "fixed", URL: rc.srv.URL, Pattern: "x", Secret: "k"}, // the file's
		{Name: "n", URL: "ftp://x", Pattern: "x", Secret: "k"},
		{Name: "n", URL: rc.srv.URL, Pattern: "x"},
	} {
		resp := admin.Call(protocol.MethodWebhookAdd, bad)
		require.NotNil(t, resp.Error, "webhook.add %+v was taken", bad)
		require.EqualValues(t, protocol.CodeInvalidParams, resp.Error.Code)
	}
	resp := admin.Call(protocol.MethodWebhookRemove, protocol.WebhookRemoveParams{Name: "fixed"})
	require.NotNil(t, resp.Error, "the configuration's webhook was removed")
	require.Contains(t, resp.Error.Message, "configuration file")

	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()
	require.NoError(t, first.Shutdown(ctx))
	second := start(t, opts, hooks)
	admin = bustest.Dial(t, second.URL)
	admin.Initialize("ops")
	var list protocol.WebhookListResult
	admin.MustCall(protocol.MethodWebhookList, map[string]any{}, &list)
	require.Len(t, list.Webhooks, 2)
	require.Equal(t, "fixed", list.Webhooks[0].Name)
	require.True(t, list.Webhooks[0].Configured)
	require.Equal(t, "made", list.Webhooks[1].Name)
	require.False(t, list.Webhooks[1].Configured)
	raw := admin.Call(protocol.MethodWebhookList, map[string]any{})
	require.NotContains(t, string(raw.Result), "admin-secret")
	r = admin.Publish("made:2", "t")
	require.True(t, r.Acks[0].Processed, "after a restart: %+v", r.Acks)
	<-rc.got

	admin.MustCall(protocol.MethodWebhookRemove, protocol.WebhookRemoveParams{Name: "made"}, nil)
	r = admin.Publish("made:3", "t")
	require.Empty(t, r.Acks, "a removed webhook still subscribes")
	resp = admin.Call(protocol.MethodWebhookRemove, protocol.WebhookRemoveParams{Name: "made"})
	require.NotNil(t, resp.Error, "removed twice")
	stored, err := st.Webhooks()
	require.NoError(t, err)
	require.Empty(t, stored)
}

// TestWebhookOutTimeout checks that a receiver that does not answer
// within the delivery timeout is retried, as a 5xx is, until it
// answers.
func TestWebhookOutTimeout(t *testing.T) {
	var mu sync.Mutex
	calls := 0
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls++
		first := calls == 1
		mu.Unlock()
		if first {
			// Read to the end, so that the server notices the bus
			// closing the connection when it gives up.
			_, _ = io.Copy(io.Discard, r.Body)
			select {
			case <-r.Context().Done():
			case <-time.After(bustest.Timeout):
			}
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(receiver.Close)
	st := store.OpenMemory()
	srv := start(t, &bus.Options{Store: st, DeliveryTimeout: 300 * time.Millisecond, RetryBaseDelay: 10 * time.Millisecond, MaxAttempts: 20}, webhook.Options{
		AllowPrivate:  true,
		Subscriptions: []webhook.Subscription{{Name: "slow", URL: receiver.URL, Pattern: "slow", Secret: []byte("k")}},
	})
	pub := bustest.Dial(t, srv.URL)
	pub.Initialize("p")
	r := pub.Publish("slow", "t")
	require.True(t, r.Acks[0].Retrying, "%+v", r.Acks[0])
	require.Contains(t, r.Acks[0].Error, "did not answer within")
	require.Eventually(t, func() bool {
		n, _, err := st.PendingUsage("")
		return err == nil && n.Entries == 0
	}, bustest.Timeout, 10*time.Millisecond, "the retry is delivered")
	dead, _, err := st.ListDeadLetters(store.Filter{}, "", 10)
	require.NoError(t, err)
	require.Empty(t, dead)
	require.GreaterOrEqual(t, metric(t, srv, "bub_webhook_calls_total", "timeout"), 1.0)
}

// TestWebhookRetryResumedAfterRestart: a retry for a webhook subscriber
// that was pending when the bus stopped is made by the next start, to
// the same URL: the subscription is back before the pending work
// resumes, so the retry finds its subscriber instead of being
// dead-lettered subscriber_gone.
func TestWebhookRetryResumedAfterRestart(t *testing.T) {
	rc := newReceiver(t, "k", map[string][]int{"flaky": {500}})
	st := store.OpenMemory()
	opts := &bus.Options{Store: st, RetryBaseDelay: 300 * time.Millisecond}
	hooks := webhook.Options{AllowPrivate: true, Subscriptions: []webhook.Subscription{{Name: "r", URL: rc.srv.URL, Pattern: "r", Secret: []byte("k")}}}
	first := start(t, opts, hooks)
	pub := bustest.Dial(t, first.URL)
	pub.Initialize("p")
	r := pub.Publish("r", "flaky")
	require.True(t, r.Acks[0].Retrying, "%+v", r.Acks[0])
	require.Equal(t, 1, (<-rc.got).Attempt)
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()
	require.NoError(t, first.Shutdown(ctx))
	n, _, err := st.PendingUsage("")
	require.NoError(t, err)
	require.EqualValues(t, 1, n.Entries, "the retry is pending in the store")

	start(t, opts, hooks)
	require.Equal(t, 2, (<-rc.got).Attempt, "the resumed retry reaches the URL")
	require.Eventually(t, func() bool {
		n, _, err := st.PendingUsage("")
		return err == nil && n.Entries == 0
	}, bustest.Timeout, 10*time.Millisecond, "the retry is settled")
	dead, _, err := st.ListDeadLetters(store.Filter{}, "", 10)
	require.NoError(t, err)
	require.Empty(t, dead)
}

// TestWebhookPayloadField checks a subscription with PayloadField and
// Headers: the body is that field of the payload alone, signed, with
// the headers given; a payload without the field is dead-lettered at
// once; reserved headers are refused when the subscription is made.
func TestWebhookPayloadField(t *testing.T) {
	type post struct {
		body   string
		header http.Header
	}
	got := make(chan post, 4)
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- post{string(body), r.Header}
	}))
	t.Cleanup(rc.Close)
	st := store.OpenMemory()
	srv := start(t, &bus.Options{Store: st}, webhook.Options{
		AllowPrivate: true, Store: st,
		Subscriptions: []webhook.Subscription{{Name: "raw", URL: rc.URL, Pattern: "raw:*", Secret: []byte("s"), PayloadField: "body",
			Headers: map[string]string{"authorization": "Bearer tok", "Content-Type": "application/a2a+json"}}},
	})
	pub := bustest.Dial(t, srv.URL)
	pub.Initialize("p")
	var r protocol.SendMessageResult
	pub.MustCall(protocol.MethodSendMessage, map[string]any{"topic": "raw:1", "payload": map[string]any{"type": "x", "body": map[string]any{"a": 1}}}, &r)
	require.True(t, r.Acks[0].Processed, "%+v", r.Acks[0])
	p := <-got
	require.JSONEq(t, `{"a":1}`, p.body)
	require.Equal(t, "Bearer tok", p.header.Get("Authorization"))
	require.Equal(t, "application/a2a+json", p.header.Get("Content-Type"))
	ts, v1, _ := strings.Cut(strings.TrimPrefix(p.header.Get(webhook.HeaderSignature), "t="), ",v1=")
	require.Equal(t, bustest.HMACHex("s", ts+"."+p.body), v1, "the signature covers the body sent")

	pub.MustCall(protocol.MethodSendMessage, map[string]any{"topic": "raw:2", "payload": map[string]any{"type": "x"}}, &r)
	require.NotEmpty(t, r.Acks[0].DeadLetter, "a payload without the field is dead-lettered at once: %+v", r.Acks[0])
	require.Contains(t, r.Acks[0].Message, `no field "body"`)

	admin := bustest.Dial(t, srv.URL)
	admin.Initialize("admin")
	for _, h := range []string{"Bub-Signature", "Host", "bad name"} {
		resp := admin.Call(protocol.MethodWebhookAdd, protocol.WebhookAddParams{Name: "h", URL: rc.URL, Pattern: "x", Secret: "s", Headers: map[string]string{h: "v"}})
		require.NotNil(t, resp.Error, "header %q was taken", h)
		require.Contains(t, resp.Error.Message, "header", "header %q", h)
	}
}
