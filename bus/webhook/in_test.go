package webhook_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/bus/webhook"
	"github.com/bub-bus/bub/cluster/clustertest"
	"github.com/bub-bus/bub/protocol"
)

// TestHookStatuses posts to /v1/hooks/{name} over real HTTP and checks
// every answer: a signed request is published on its template's topic
// (201), a bad, missing or stale signature is 401 and publishes
// nothing, a delivery id seen before is 409, and the rest are 400, 404,
// 405 and 413. Each refusal is counted.
func TestHookStatuses(t *testing.T) {
	srv := start(t, nil, webhook.Options{Hooks: []webhook.Hook{
		{Name: "github", Scheme: webhook.SchemeGitHub, Secret: []byte("gh-secret"), Topic: "webhook:github:{repository.full_name}:{header:X-GitHub-Event}"},
		{Name: "vector", Scheme: webhook.SchemeGitHub, Secret: []byte("It's a Secret to Everybody"), Topic: "webhook:vector"},
		{Name: "stripe", Scheme: webhook.SchemeStripe, Secret: []byte("whsec_x"), Topic: "webhook:stripe:{type}"},
		{Name: "small", Scheme: webhook.SchemeNone, Insecure: true, Topic: "webhook:small", MaxBodyBytes: 64},
	}})
	_, got := bustest.Collect(t, srv.URL, "sink", "webhook:*")
	push := `{"repository":{"full_name":"octo/hello"},"ref":"refs/heads/main"}`
	push2 := `{"repository":{"full_name":"octo/hello"},"ref":"refs/heads/dev"}`
	ghHeaderAs := func(body, delivery, event string) map[string]string {
		return map[string]string{"X-Hub-Signature-256": "sha256=" + bustest.HMACHex("gh-secret", body), "X-GitHub-Event": event, "X-GitHub-Delivery": delivery}
	}
	ghHeader := func(body, delivery string) map[string]string { return ghHeaderAs(body, delivery, "push") }
	notUTF8 := `{"repository":{"full_name":"octo/hello"},"x":"` + "\xff\xfe" + `"}`
	now := strconv.FormatInt(time.Now().Unix(), 10)
	old := strconv.FormatInt(time.Now().Add(-time.Hour).Unix(), 10)
	event := `{"id":"evt_1","type":"invoice.paid"}`
	tests := []struct {
		name   string
		method string
		path   string
		body   string
		header map[string]string
		status int
		code   int64
		topic  string // of the message published, for 201
	}{
		{"github signed", "POST", "/v1/hooks/github", push, ghHeader(push, "d-1"), 201, 0, "webhook:github:octo/hello:push"},
		{"github replayed", "POST", "/v1/hooks/github", push, ghHeader(push, "d-1"), 409, protocol.CodeInvalidParams, ""},
		{"github id reused, other body", "POST", "/v1/hooks/github", `{"repository":{"full_name":"x/y"}}`, ghHeader(`{"repository":{"full_name":"x/y"}}`, "d-1"), 409, protocol.CodeInvalidParams, ""},
		{"github wrong signature", "POST", "/v1/hooks/github", push, map[string]string{"X-Hub-Signature-256": "sha256=" + bustest.HMACHex("other", push), "X-GitHub-Event": "push", "X-GitHub-Delivery": "d-2"}, 401, protocol.CodeUnauthorized, ""},
		{"github no signature", "POST", "/v1/hooks/github", push, map[string]string{"X-GitHub-Event": "push", "X-GitHub-Delivery": "d-3"}, 401, protocol.CodeUnauthorized, ""},
		{"github no delivery id", "POST", "/v1/hooks/github", push, ghHeader(push, ""), 400, protocol.CodeInvalidParams, ""},
		{"github field missing", "POST", "/v1/hooks/github", `{"zen":"hi"}`, ghHeader(`{"zen":"hi"}`, "d-4"), 400, protocol.CodeInvalidParams, ""},
		// The signature covers the body only: the same body under a new
		// delivery id, or with its event header changed to route it
		// elsewhere, is the captured request again.
		{"github replayed, new delivery id", "POST", "/v1/hooks/github", push, ghHeader(push, "d-5"), 409, protocol.CodeInvalidParams, ""},
		{"github replayed, re-routed", "POST", "/v1/hooks/github", push, ghHeaderAs(push, "d-6", "deployment"), 409, protocol.CodeInvalidParams, ""},
		{"github second delivery", "POST", "/v1/hooks/github", push2, ghHeader(push2, "d-7"), 201, 0, "webhook:github:octo/hello:push"},
		{"github not UTF-8", "POST", "/v1/hooks/github", notUTF8, ghHeader(notUTF8, "d-8"), 400, protocol.CodeParseError, ""},
		// GitHub's own test vector passes the signature check; its body
		// is no JSON, so it is refused after it.
		{"github's vector", "POST", "/v1/hooks/vector", "Hello, World!", map[string]string{"X-Hub-Signature-256": "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17", "X-GitHub-Delivery": "v-1"}, 400, protocol.CodeParseError, ""},
		{"stripe signed", "POST", "/v1/hooks/stripe", event, map[string]string{"Stripe-Signature": "t=" + now + ",v1=" + bustest.HMACHex("whsec_x", now+"."+event)}, 201, 0, "webhook:stripe:invoice.paid"},
		{"stripe event replayed", "POST", "/v1/hooks/stripe", event, map[string]string{"Stripe-Signature": "t=" + now + ",v1=" + bustest.HMACHex("whsec_x", now+"."+event)}, 409, protocol.CodeInvalidParams, ""},
		{"stripe stale", "POST", "/v1/hooks/stripe", `{"id":"evt_2","type":"invoice.paid"}`, map[string]string{"Stripe-Signature": "t=" + old + ",v1=" + bustest.HMACHex("whsec_x", old+`.{"id":"evt_2","type":"invoice.paid"}`)}, 401, protocol.CodeUnauthorized, ""},
		{"stripe malformed", "POST", "/v1/hooks/stripe", event, map[string]string{"Stripe-Signature": "v1=zz"}, 401, protocol.CodeUnauthorized, ""},
		{"insecure hook", "POST", "/v1/hooks/small", `{"n":1}`, nil, 201, 0, "webhook:small"},
		{"too large", "POST", "/v1/hooks/small", `{"n":"` + strings.Repeat("x", 100) + `"}`, nil, 413, protocol.CodeLimitReached, ""},
		{"unknown hook", "POST", "/v1/hooks/nope", `{}`, nil, 404, protocol.CodeInvalidParams, ""},
		{"GET", "GET", "/v1/hooks/github", "", nil, 405, protocol.CodeMethodNotFound, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := do(t, srv, tt.method, tt.path, tt.body, tt.header)
			if a.Status != tt.status || a.ErrorCode() != tt.code {
				t.Fatalf("got %d %s; want %d with code %d", a.Status, a.Body, tt.status, tt.code)
			}
			if tt.status == 401 && a.Header.Get("WWW-Authenticate") == "" {
				t.Errorf("401 without WWW-Authenticate")
			}
			if strings.Contains(string(a.Body), "secret") && !strings.Contains(tt.name, "secret") {
				t.Errorf("the answer mentions a secret: %s", a.Body)
			}
			if tt.status != 201 {
				return
			}
			id := a.MessageID(t)
			// Every refusal before it published nothing: the next
			// delivery is this one.
			d := <-got
			if d.MessageID != id || d.Topic != tt.topic {
				t.Fatalf("delivered %s on %s; want %s on %s", d.MessageID, d.Topic, id, tt.topic)
			}
			hook := strings.TrimPrefix(tt.path, webhook.PathHooks)
			if d.From != "bub-hook-"+hook {
				t.Errorf("from %q; want bub-hook-%s", d.From, hook)
			}
			var payload struct {
				Type string          `json:"type"`
				Body json.RawMessage `json:"body"`
			}
			var meta struct {
				Webhook string `json:"webhook"`
			}
			if err := json.Unmarshal(d.Payload, &payload); err != nil || payload.Type != "webhook" || string(payload.Body) != tt.body {
				t.Errorf("payload %s; want type webhook and the body %s (%v)", d.Payload, tt.body, err)
			}
			if err := json.Unmarshal(d.Meta, &meta); err != nil || meta.Webhook != hook {
				t.Errorf("meta %s; want webhook %q", d.Meta, hook)
			}
		})
	}
	for outcome, want := range map[string]float64{"published": 4, "bad_signature": 3, "stale": 1, "replay": 5, "bad_request": 5, "too_large": 1, "not_found": 1} {
		if n := metric(t, srv, "bub_webhook_requests_total", outcome); n != want {
			t.Errorf("bub_webhook_requests_total{outcome=%q} = %v; want %v", outcome, n, want)
		}
	}
}

// TestHookReplayKeptAcrossRestart checks that the delivery ids are in
// the store: a bus started again on it refuses a delivery the first
// one took.
func TestHookReplayKeptAcrossRestart(t *testing.T) {
	st := store.OpenMemory()
	hooks := []webhook.Hook{{Name: "gh", Scheme: webhook.SchemeGitHub, Secret: []byte("k"), Topic: "webhook:gh"}}
	body := `{"a":1}`
	header := map[string]string{"X-Hub-Signature-256": "sha256=" + bustest.HMACHex("k", body), "X-GitHub-Delivery": "once"}
	first := start(t, &bus.Options{Store: st}, webhook.Options{Hooks: hooks})
	if a := do(t, first, "POST", "/v1/hooks/gh", body, header); a.Status != 201 {
		t.Fatalf("first: %d %s", a.Status, a.Body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()
	if err := first.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	second := start(t, &bus.Options{Store: st}, webhook.Options{Hooks: hooks})
	if a := do(t, second, "POST", "/v1/hooks/gh", body, header); a.Status != 409 {
		t.Fatalf("after a restart: %d %s; want 409", a.Status, a.Body)
	}
}

// TestHookReplayOnCluster checks that a cluster refuses a delivery id
// one of its nodes took, on the other node too: the hook's keys are in
// the cluster's store.
func TestHookReplayOnCluster(t *testing.T) {
	nodes := clustertest.Start(t, &bus.Options{Extensions: []bus.Extension{webhook.New(webhook.Options{
		Hooks: []webhook.Hook{{Name: "gh", Scheme: webhook.SchemeGitHub, Secret: []byte("k"), Topic: "webhook:gh"}},
	})}}, "n1", "n2")
	body := `{"a":1}`
	header := map[string]string{"X-Hub-Signature-256": "sha256=" + bustest.HMACHex("k", body), "X-GitHub-Delivery": "once"}
	for i, want := range []int{201, 409} {
		if a := do(t, nodes[i], "POST", "/v1/hooks/gh", body, header); a.Status != want {
			t.Fatalf("request %d: %d %s; want %d", i, a.Status, a.Body, want)
		}
	}
}

// TestHookReplayHMAC (reproduction 4, the hmac variant): a hook whose
// delivery id comes from an unsigned header, or that has none, refuses
// a captured request sent again with another id; another body goes
// through.
func TestHookReplayHMAC(t *testing.T) {
	t.Parallel()
	srv := start(t, nil, webhook.Options{Hooks: []webhook.Hook{
		{Name: "shop", Scheme: webhook.SchemeHMAC, Secret: []byte("k"), Header: "X-Shop-Hmac-Sha256", Topic: "webhook:shop", DeliveryID: "{header:X-Shop-Webhook-Id}"},
		{Name: "plain", Scheme: webhook.SchemeHMAC, Secret: []byte("k"), Header: "X-Sig", Topic: "webhook:plain"},
	}})
	post := func(hook, header, body, id string) int {
		h := map[string]string{header: bustest.HMACHex("k", body)}
		if id != "" {
			h["X-Shop-Webhook-Id"] = id
		}
		a := do(t, srv, "POST", webhook.PathHooks+hook, body, h)
		return a.Status
	}
	require.Equal(t, 201, post("shop", "X-Shop-Hmac-Sha256", `{"order":1}`, "w-1"))
	require.Equal(t, 409, post("shop", "X-Shop-Hmac-Sha256", `{"order":1}`, "w-2"), "the same signed body under a new id")
	require.Equal(t, 201, post("shop", "X-Shop-Hmac-Sha256", `{"order":2}`, "w-3"))
	require.Equal(t, 201, post("plain", "X-Sig", `{"n":1}`, ""))
	require.Equal(t, 409, post("plain", "X-Sig", `{"n":1}`, ""), "a hook without delivery ids")
}
