package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/protocol"
)

// testWebhooks are the webhooks of a bus with defaults.
func testWebhooks(t testing.TB) *webhooks {
	t.Helper()
	s, err := bus.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	return &webhooks{bus: s}
}

// newTestHook makes a hook ready to serve from cfg on w.
func (w *webhooks) newTestHook(cfg Hook) (*hook, error) {
	return w.newHook(cfg, w.bus.Options().MaxMessageBytes)
}

// testHook makes a hook ready to serve from cfg on a bus with defaults.
func testHook(t *testing.T, cfg Hook) *hook {
	t.Helper()
	h, err := testWebhooks(t).newTestHook(cfg)
	if err != nil {
		t.Fatalf("newHook: %v", err)
	}
	return h
}

// TestHookSignatureVectors checks each scheme against published or
// independently computed test vectors: GitHub's own (docs.github.com,
// "Validating webhook deliveries"), and for stripe and hmac, signatures
// computed with openssl dgst -sha256 -hmac, not with this code. Each
// vector passes as given and fails with any one thing changed.
func TestHookSignatureVectors(t *testing.T) {
	stripeAt := time.Unix(1700000000, 0)
	tests := []struct {
		name   string
		hook   Hook
		header map[string]string
		body   string
		now    time.Time
		want   string // "" accepted, else the outcome
	}{
		{"github vector", Hook{Scheme: SchemeGitHub, Secret: []byte("It's a Secret to Everybody")},
			map[string]string{"X-Hub-Signature-256": "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"}, "Hello, World!", time.Now(), ""},
		{"github vector, upper-case hex", Hook{Scheme: SchemeGitHub, Secret: []byte("It's a Secret to Everybody")},
			map[string]string{"X-Hub-Signature-256": "sha256=757107EA0EB2509FC211221CCE984B8A37570B6D7586C22C46F4379C8B043E17"}, "Hello, World!", time.Now(), ""},
		{"github, body changed", Hook{Scheme: SchemeGitHub, Secret: []byte("It's a Secret to Everybody")},
			map[string]string{"X-Hub-Signature-256": "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"}, "Hello, World?", time.Now(), hookBadSignature},
		{"github, other secret", Hook{Scheme: SchemeGitHub, Secret: []byte("It's a secret to everybody")},
			map[string]string{"X-Hub-Signature-256": "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"}, "Hello, World!", time.Now(), hookBadSignature},
		{"github, no prefix", Hook{Scheme: SchemeGitHub, Secret: []byte("It's a Secret to Everybody")},
			map[string]string{"X-Hub-Signature-256": "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"}, "Hello, World!", time.Now(), hookBadSignature},
		{"github, sha1 header only", Hook{Scheme: SchemeGitHub, Secret: []byte("It's a Secret to Everybody")},
			map[string]string{"X-Hub-Signature": "sha1=01dc10d0c83e72ed246219cdd91669667fe2ca59"}, "Hello, World!", time.Now(), hookBadSignature},
		{"stripe", Hook{Scheme: SchemeStripe, Secret: []byte("whsec_test_secret"), Tolerance: 5 * time.Minute},
			map[string]string{"Stripe-Signature": "t=1700000000,v1=22d8dc182f5c588077683bd378368e29765bfe5df2560112b4f28fef120f0e31"}, `{"id":"evt_1","type":"payment_intent.succeeded"}`, stripeAt.Add(299 * time.Second), ""},
		{"stripe, rolled secrets and v0", Hook{Scheme: SchemeStripe, Secret: []byte("whsec_test_secret"), Tolerance: 5 * time.Minute},
			map[string]string{"Stripe-Signature": "t=1700000000,v1=" + strings.Repeat("00", 32) + ",v1=22d8dc182f5c588077683bd378368e29765bfe5df2560112b4f28fef120f0e31,v0=abc"}, `{"id":"evt_1","type":"payment_intent.succeeded"}`, stripeAt, ""},
		{"stripe, too old", Hook{Scheme: SchemeStripe, Secret: []byte("whsec_test_secret"), Tolerance: 5 * time.Minute},
			map[string]string{"Stripe-Signature": "t=1700000000,v1=22d8dc182f5c588077683bd378368e29765bfe5df2560112b4f28fef120f0e31"}, `{"id":"evt_1","type":"payment_intent.succeeded"}`, stripeAt.Add(301 * time.Second), hookStale},
		{"stripe, from the future", Hook{Scheme: SchemeStripe, Secret: []byte("whsec_test_secret"), Tolerance: 5 * time.Minute},
			map[string]string{"Stripe-Signature": "t=1700000000,v1=22d8dc182f5c588077683bd378368e29765bfe5df2560112b4f28fef120f0e31"}, `{"id":"evt_1","type":"payment_intent.succeeded"}`, stripeAt.Add(-301 * time.Second), hookStale},
		{"stripe, timestamp changed", Hook{Scheme: SchemeStripe, Secret: []byte("whsec_test_secret"), Tolerance: 5 * time.Minute},
			map[string]string{"Stripe-Signature": "t=1700000001,v1=22d8dc182f5c588077683bd378368e29765bfe5df2560112b4f28fef120f0e31"}, `{"id":"evt_1","type":"payment_intent.succeeded"}`, stripeAt, hookBadSignature},
		{"stripe, v0 only", Hook{Scheme: SchemeStripe, Secret: []byte("whsec_test_secret"), Tolerance: 5 * time.Minute},
			map[string]string{"Stripe-Signature": "t=1700000000,v0=22d8dc182f5c588077683bd378368e29765bfe5df2560112b4f28fef120f0e31"}, `{"id":"evt_1","type":"payment_intent.succeeded"}`, stripeAt, hookBadSignature},
		{"hmac hex", Hook{Scheme: SchemeHMAC, Secret: []byte("s3cret"), Header: "X-Signature", Encoding: "hex"},
			map[string]string{"X-Signature": "dfdb9d36759a59dc252c24d194f7122a8df08cb88f87fa8d5c6b24ff48fe45d8"}, `{"event":"ping"}`, time.Now(), ""},
		{"hmac hex with prefix", Hook{Scheme: SchemeHMAC, Secret: []byte("s3cret"), Header: "X-Signature", Encoding: "hex", Prefix: "sha256="},
			map[string]string{"X-Signature": "sha256=dfdb9d36759a59dc252c24d194f7122a8df08cb88f87fa8d5c6b24ff48fe45d8"}, `{"event":"ping"}`, time.Now(), ""},
		{"hmac base64", Hook{Scheme: SchemeHMAC, Secret: []byte("s3cret"), Header: "X-Shop-Hmac", Encoding: "base64"},
			map[string]string{"X-Shop-Hmac": "39udNnWaWdwlLCTRlPcSKo3wjLiPh/qNXGsk/0j+Rdg="}, `{"event":"ping"}`, time.Now(), ""},
		{"hmac base64 given hex", Hook{Scheme: SchemeHMAC, Secret: []byte("s3cret"), Header: "X-Shop-Hmac", Encoding: "base64"},
			map[string]string{"X-Shop-Hmac": "dfdb9d36759a59dc252c24d194f7122a8df08cb88f87fa8d5c6b24ff48fe45d8"}, `{"event":"ping"}`, time.Now(), hookBadSignature},
		{"hmac, header missing", Hook{Scheme: SchemeHMAC, Secret: []byte("s3cret"), Header: "X-Signature"},
			nil, `{"event":"ping"}`, time.Now(), hookBadSignature},
		{"none", Hook{Scheme: SchemeNone, Insecure: true}, nil, `{}`, time.Now(), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.hook.Name, tt.hook.Topic = "h", "webhook:h"
			h := testHook(t, tt.hook)
			header := http.Header{}
			for k, v := range tt.header {
				header.Set(k, v)
			}
			err := h.verify(header, []byte(tt.body), tt.now)
			got := ""
			if err != nil {
				got = err.(*signatureError).outcome
			}
			if got != tt.want {
				t.Fatalf("verify: %v (outcome %q); want outcome %q", err, got, tt.want)
			}
		})
	}
}

// TestHookConfigRefused checks that a hook configured unsafely or
// wrongly is refused, naming what is wrong.
func TestHookConfigRefused(t *testing.T) {
	tests := []struct {
		name string
		hook Hook
		want string
	}{
		{"no name", Hook{Scheme: SchemeNone, Insecure: true, Topic: "w:x"}, "name"},
		{"name with a slash", Hook{Name: "a/b", Scheme: SchemeNone, Insecure: true, Topic: "w:x"}, "name"},
		{"none without insecure", Hook{Name: "x", Scheme: SchemeNone, Topic: "w:x"}, "insecure: true"},
		{"no secret", Hook{Name: "x", Scheme: SchemeGitHub, Topic: "w:x"}, "needs a secret"},
		{"unknown scheme", Hook{Name: "x", Scheme: "sha1", Secret: []byte("k"), Topic: "w:x"}, "want github, stripe, hmac or none"},
		{"hmac without header", Hook{Name: "x", Scheme: SchemeHMAC, Secret: []byte("k"), Topic: "w:x"}, "needs header"},
		{"hmac bad encoding", Hook{Name: "x", Scheme: SchemeHMAC, Secret: []byte("k"), Header: "X-S", Encoding: "b32", Topic: "w:x"}, "encoding"},
		{"header on github", Hook{Name: "x", Scheme: SchemeGitHub, Secret: []byte("k"), Header: "X-S", Topic: "w:x"}, "for scheme hmac"},
		{"topic from the request alone", Hook{Name: "x", Scheme: SchemeGitHub, Secret: []byte("k"), Topic: "{repository.full_name}"}, "literal text"},
		{"bus's own topic", Hook{Name: "x", Scheme: SchemeGitHub, Secret: []byte("k"), Topic: "sys{action}"}, "system: topics"},
		{"bad template", Hook{Name: "x", Scheme: SchemeGitHub, Secret: []byte("k"), Topic: "w:{a"}, "not closed"},
		{"negative tolerance", Hook{Name: "x", Scheme: SchemeStripe, Secret: []byte("k"), Topic: "w:x", Tolerance: -time.Second}, "tolerance"},
	}
	w := testWebhooks(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := w.newTestHook(tt.hook)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("newHook: %v; want an error containing %q", err, tt.want)
			}
			if len(tt.hook.Secret) > 0 && strings.Contains(err.Error(), string(tt.hook.Secret)+"\"") {
				t.Fatalf("the error shows the secret: %v", err)
			}
		})
	}
	twice := New(Options{Hooks: []Hook{{Name: "x", Scheme: SchemeNone, Insecure: true, Topic: "w:x"}, {Name: "x", Scheme: SchemeNone, Insecure: true, Topic: "w:y"}}})
	if _, err := bus.New(&bus.Options{Extensions: []bus.Extension{twice}}); err == nil || !strings.Contains(err.Error(), "used twice") {
		t.Fatalf("two hooks named x: %v; want refused", err)
	}
}

// TestHookTemplate is the template's rules as a table: fields, headers,
// defaults, what is missing, and what a value may not bring into a
// topic.
func TestHookTemplate(t *testing.T) {
	body := `{"repository":{"full_name":"octo/hello","id":42,"private":false,"topics":["a b","c"]},
		"action":"opened","empty":"","nothing":null,"obj":{"k":1},"weird":"x*y?[z]{w}\\v\tq r\u0007"}`
	header := http.Header{"X-Github-Event": {"pull_request"}, "X-Bad": {"a b\xffc"}}
	tests := []struct {
		template, want, err string
	}{
		{"webhook:github:{repository.full_name}", "webhook:github:octo/hello", ""},
		{"gh:{header:X-GitHub-Event}:{action}", "gh:pull_request:opened", ""},
		{"gh:{repository.id}:{repository.private}", "gh:42:false", ""},
		{"gh:{repository.topics.1}", "gh:c", ""},
		{"gh:{repository.topics.0}", "gh:a_b", ""},
		{"gh:{weird}", "gh:x_y__z__w__v_q_r_", ""},
		{"gh:{header:X-Bad}", "gh:a_b_c", ""},
		{"gh:{missing|none}", "gh:none", ""},
		{"gh:{empty|none}", "gh:none", ""},
		{"gh:{nothing|none}", "gh:none", ""},
		{"gh:{obj|none}", "gh:none", ""},
		{"gh:{missing}", "", "field missing is missing"},
		{"gh:{repository.topics.7}", "", "field repository.topics.7 is missing"},
		{"gh:{action.x}", "", "field action.x is missing"},
		{"gh:{header:X-Nope}", "", "header X-Nope is missing"},
	}
	var doc any
	dec := json.NewDecoder(strings.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.template, func(t *testing.T) {
			tp, err := parseTemplate(tt.template)
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			got, err := tp.render(header, doc)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("render = %q, %v; want an error containing %q", got, err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("render = %q, %v; want %q", got, err, tt.want)
			}
			if err := protocol.ValidateTopic(got); err != nil {
				t.Fatalf("rendered %q is no topic: %v", got, err)
			}
		})
	}
	for _, bad := range []string{"", "a{", "a}", "a{}", "a{b{c}}", "a{|x}", "a{b.}", "a{header:}", "a {b}", "a{b|x y}", "a*{b}"} {
		if _, err := parseTemplate(bad); err == nil {
			t.Errorf("parseTemplate(%q) took it; want an error", bad)
		}
	}
}

// FuzzHookTemplate parses templates and renders them over a body: no
// panic, and whatever renders is a valid topic once it has literal text.
func FuzzHookTemplate(f *testing.F) {
	for _, seed := range [][2]string{
		{"webhook:github:{repository.full_name}", `{"repository":{"full_name":"a/b"}}`},
		{"x:{header:X-A}:{a.0.b|d}", `{"a":[{"b":"\u0000*"}]}`},
		{"x:{a}", `{"a":1e400}`},
		{"{}{", `[]`},
	} {
		f.Add(seed[0], []byte(seed[1]), "v")
	}
	f.Fuzz(func(t *testing.T, template string, body []byte, headerValue string) {
		tp, err := parseTemplate(template)
		if err != nil {
			return
		}
		var doc any
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.UseNumber()
		if dec.Decode(&doc) != nil {
			doc = nil
		}
		header := http.Header{}
		for _, p := range tp.parts {
			if p.header != "" {
				header.Set(p.header, headerValue)
			}
		}
		got, err := tp.render(header, doc)
		if err != nil || tp.head() == "" {
			return
		}
		if err := protocol.ValidateTopic(got); err != nil {
			t.Fatalf("template %q over %q rendered %q, no topic: %v", template, body, got, err)
		}
	})
}

// FuzzStripeSignature parses Stripe-Signature values: no panic, a value
// it takes has a positive time and one to maxStripeSignatures
// signatures of 32 bytes.
func FuzzStripeSignature(f *testing.F) {
	for _, seed := range []string{
		"t=1700000000,v1=22d8dc182f5c588077683bd378368e29765bfe5df2560112b4f28fef120f0e31",
		"t=1,v1=00,v0=zz", "t=,v1=", "v1=aa", "t=1,t=2", ",,,", "t=-5,v1=" + strings.Repeat("ab", 32),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		ts, sigs, err := parseStripeSignature(v)
		if err != nil {
			return
		}
		if ts <= 0 || len(sigs) == 0 || len(sigs) > maxStripeSignatures {
			t.Fatalf("%q: t %d and %d signatures", v, ts, len(sigs))
		}
		for _, s := range sigs {
			if len(s) != 32 {
				t.Fatalf("%q: a signature of %d bytes", v, len(s))
			}
		}
	})
}

// FuzzHookVerify runs every scheme's check over arbitrary headers and
// bodies: no panic, and an unsigned request never passes a signed
// scheme.
func FuzzHookVerify(f *testing.F) {
	f.Add("sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17", []byte("Hello, World!"))
	f.Add("t=1700000000,v1=22d8dc182f5c588077683bd378368e29765bfe5df2560112b4f28fef120f0e31", []byte(`{}`))
	f.Add("sha256=", []byte{})
	w := testWebhooks(f)
	var hooks []*hook
	for _, cfg := range []Hook{
		{Scheme: SchemeGitHub}, {Scheme: SchemeStripe}, {Scheme: SchemeHMAC, Header: "X-Sig", Encoding: "base64", Prefix: "v1="}, {Scheme: SchemeHMAC, Header: "X-Sig"},
	} {
		cfg.Name, cfg.Topic, cfg.Secret = "f", "f:x", []byte("fuzz secret")
		h, err := w.newTestHook(cfg)
		if err != nil {
			f.Fatal(err)
		}
		hooks = append(hooks, h)
	}
	f.Fuzz(func(t *testing.T, value string, body []byte) {
		header := http.Header{}
		for _, name := range []string{"X-Hub-Signature-256", "Stripe-Signature", "X-Sig"} {
			header.Set(name, value)
		}
		for _, h := range hooks {
			if err := h.verify(header, body, time.Unix(1700000000, 0)); err == nil {
				t.Fatalf("scheme %s took %q over %q, not signed with its secret", h.Scheme, value, body)
			}
		}
	})
}

// TestPublicAddress is the SSRF rule as a table: what the bus calls
// without --webhook-allow-private.
func TestPublicAddress(t *testing.T) {
	for addr, want := range map[string]bool{
		"93.184.216.34": true, "2606:2800:220:1:248:1893:25c8:1946": true, "8.8.8.8": true,
		"127.0.0.1": false, "127.1.2.3": false, "::1": false, "::ffff:127.0.0.1": false,
		"10.0.0.1": false, "172.16.0.1": false, "192.168.1.1": false, "fd00::1": false,
		"169.254.169.254": false, "fe80::1": false, "0.0.0.0": false, "::": false,
		"100.64.0.1": false, "224.0.0.1": false, "255.255.255.255": false,
		"64:ff9b::7f00:1": false, "2002:7f00:1::": false, "::ffff:169.254.169.254": false,
	} {
		if got := publicAddress(netip.MustParseAddr(addr)); got != want {
			t.Errorf("publicAddress(%s) = %v; want %v", addr, got, want)
		}
	}
}
