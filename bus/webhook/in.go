package webhook

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/internal/httpjson"
	"github.com/bub-bus/bub/internal/rpcstream"
	"github.com/bub-bus/bub/protocol"
)

// Incoming webhooks (docs/PROTOCOL.md, "Webhooks in"): a service that
// can only call a URL (GitHub, Stripe, a cron job) POSTs to
// /v1/hooks/{name}; the bus checks the request's signature with the
// hook's secret, turns the body into a message on the topic the hook's
// template names, and publishes it as the hook's own publisher, the
// reserved clientId bub-hook-{name}. The signature is the credential:
// no bearer token is asked for.

// PathHooks is the prefix of the incoming webhooks' URLs.
const PathHooks = "/v1/hooks/"

// The signature schemes of a Hook.
const (
	// SchemeGitHub: X-Hub-Signature-256 is "sha256=" and the hex
	// HMAC-SHA256 of the body.
	SchemeGitHub = "github"
	// SchemeStripe: Stripe-Signature is "t=UNIX,v1=HEX[,v1=HEX...]",
	// HEX the HMAC-SHA256 of "UNIX.body"; t must be within the
	// tolerance.
	SchemeStripe = "stripe"
	// SchemeHMAC: Hook.Header is Hook.Prefix and the HMAC-SHA256 of the
	// body, in hex or base64 (Hook.Encoding).
	SchemeHMAC = "hmac"
	// SchemeNone checks nothing; only with Hook.Insecure.
	SchemeNone = "none"
)

// hookClientPrefix begins the clientId a hook publishes as: under the
// bus's reserved "bub-", so that no peer can send messages that look
// like a hook's.
const hookClientPrefix = "bub-hook-"

// defaultHookTolerance is how far a stripe hook's timestamp may be from
// the bus's clock, as Stripe's own libraries default to.
const defaultHookTolerance = 5 * time.Minute

// Hook is one incoming webhook. The zero value of each optional field
// means its default.
type Hook struct {
	// Name is the last segment of its URL, /v1/hooks/{Name}: letters,
	// digits, '-' and '_'.
	Name string
	// Scheme is how requests are signed: SchemeGitHub, SchemeStripe,
	// SchemeHMAC or SchemeNone.
	Scheme string
	// Secret is the shared secret the signature is made with; required
	// unless Scheme is SchemeNone. It is never logged.
	Secret []byte
	// Header names the header carrying the signature; SchemeHMAC only,
	// where it is required.
	Header string
	// Encoding of a SchemeHMAC signature: "hex" (default) or "base64".
	Encoding string
	// Prefix is text before a SchemeHMAC signature, such as "sha256=".
	Prefix string
	// Tolerance is how far a SchemeStripe timestamp may be from the bus's
	// clock, either way. Default: 5m.
	Tolerance time.Duration
	// Topic is the topic template (see parseTemplate): literal text and
	// {field.path}, {header:Name} and {...|default} placeholders,
	// starting with literal text, such as
	// "webhook:github:{repository.full_name}".
	Topic string
	// DeliveryID is a template naming the request's delivery id; a
	// delivery id seen before within bus.Options.IdempotencyWindow is
	// refused as a replay. Default: {header:X-GitHub-Delivery} for
	// SchemeGitHub, {id} (the event's id) for SchemeStripe, none otherwise.
	DeliveryID string
	// Insecure must be set for SchemeNone: anyone who can reach the bus
	// can then publish to the hook's topics.
	Insecure bool
	// MaxBodyBytes bounds a request's body; a larger one is refused with
	// 413. Default and maximum: bus.Options.MaxMessageBytes.
	MaxBodyBytes int64
}

// hook is a Hook ready to serve.
type hook struct {
	Hook
	topic      *template
	deliveryID *template
	// publisher is who the hook publishes as (bus.Publish), so its
	// messages take every door's checks.
	publisher *bus.Publisher
}

// hookName is what a hook's name may be: it is a URL segment and part
// of a clientId.
func checkHookName(name string) error {
	if name == "" || len(name) > 64 {
		return errors.New("want 1 to 64 characters")
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return fmt.Errorf("%q is not a letter, digit, '-' or '_'", r)
		}
	}
	return nil
}

// newHooks checks the configured hooks and makes them ready to serve;
// maxBody is the bus's largest message.
func (w *webhooks) newHooks(list []Hook, maxBody int64) (map[string]*hook, error) {
	hooks := make(map[string]*hook, len(list))
	for i, cfg := range list {
		h, err := w.newHook(cfg, maxBody)
		if err != nil {
			return nil, fmt.Errorf("hook %d (%q): %w", i, cfg.Name, err)
		}
		if hooks[h.Name] != nil {
			return nil, fmt.Errorf("hook %d: the name %q is used twice", i, h.Name)
		}
		hooks[h.Name] = h
	}
	return hooks, nil
}

func (w *webhooks) newHook(cfg Hook, maxBody int64) (*hook, error) {
	if err := checkHookName(cfg.Name); err != nil {
		return nil, fmt.Errorf("name: %w", err)
	}
	switch cfg.Scheme {
	case SchemeGitHub, SchemeStripe, SchemeHMAC:
		if len(cfg.Secret) == 0 {
			return nil, fmt.Errorf("scheme %s needs a secret", cfg.Scheme)
		}
	case SchemeNone:
		if !cfg.Insecure {
			return nil, errors.New("scheme none checks no signature: anyone who reaches the bus could publish to this hook's topics; set insecure: true to mean it")
		}
	default:
		return nil, fmt.Errorf("scheme %q: want github, stripe, hmac or none", cfg.Scheme)
	}
	if cfg.Scheme == SchemeHMAC {
		if cfg.Header == "" {
			return nil, errors.New("scheme hmac needs header: the header that carries the signature")
		}
		switch cfg.Encoding {
		case "":
			cfg.Encoding = "hex"
		case "hex", "base64":
		default:
			return nil, fmt.Errorf("encoding %q: want hex or base64", cfg.Encoding)
		}
	} else if cfg.Header != "" || cfg.Encoding != "" || cfg.Prefix != "" {
		return nil, fmt.Errorf("header, encoding and prefix are for scheme hmac; scheme %s has its own", cfg.Scheme)
	}
	if cfg.Tolerance < 0 {
		return nil, fmt.Errorf("tolerance %s: want a positive duration", cfg.Tolerance)
	}
	if cfg.Tolerance == 0 {
		cfg.Tolerance = defaultHookTolerance
	}
	if cfg.MaxBodyBytes <= 0 || cfg.MaxBodyBytes > maxBody {
		cfg.MaxBodyBytes = maxBody
	}
	topic, err := parseTemplate(cfg.Topic)
	if err != nil {
		return nil, fmt.Errorf("topic %q: %w", cfg.Topic, err)
	}
	if topic.head() == "" {
		return nil, fmt.Errorf("topic %q: must start with literal text, such as webhook:%s:, so that the request cannot choose the whole topic", cfg.Topic, cfg.Name)
	}
	if head := topic.head(); strings.HasPrefix(head, "system:") || strings.HasPrefix("system:", head) {
		// The bus's own topics are under system:, and a request must not
		// be able to fill a placeholder up to one of them; the publish
		// path refuses them too.
		return nil, fmt.Errorf("topic %q: the system: topics are the bus's own; start with a prefix of the hook's, such as webhook:%s:", cfg.Topic, cfg.Name)
	}
	if cfg.DeliveryID == "" {
		switch cfg.Scheme {
		case SchemeGitHub:
			cfg.DeliveryID = "{header:X-GitHub-Delivery}"
		case SchemeStripe:
			cfg.DeliveryID = "{id}"
		}
	}
	h := &hook{Hook: cfg, topic: topic}
	if cfg.DeliveryID != "" {
		if h.deliveryID, err = parseTemplate(cfg.DeliveryID); err != nil {
			return nil, fmt.Errorf("delivery_id %q: %w", cfg.DeliveryID, err)
		}
	}
	// No grant: the operator who configured the hook chose its topics.
	h.publisher = w.bus.NewPublisher(hookClientPrefix+cfg.Name, "", "hook "+cfg.Name, "hook", cfg.Name)
	return h, nil
}

// Outcomes of an incoming webhook request, its metrics label.
const (
	hookPublished    = "published"
	hookNotFound     = "not_found"
	hookBadSignature = "bad_signature"
	hookStale        = "stale"
	hookReplay       = "replay"
	hookTooLarge     = "too_large"
	hookBadRequest   = "bad_request"
	hookRefused      = "refused"
)

var hookOutcomes = []string{hookPublished, hookNotFound, hookBadSignature, hookStale, hookReplay, hookTooLarge, hookBadRequest, hookRefused}

// signatureError is a request whose signature does not check out; the
// caller hears only that, the log hears why.
type signatureError struct {
	outcome string // hookBadSignature or hookStale
	why     string
}

func (e *signatureError) Error() string { return e.why }

// verify checks body's signature in header at now.
func (h *hook) verify(header http.Header, body []byte, now time.Time) error {
	switch h.Scheme {
	case SchemeGitHub:
		v := header.Get("X-Hub-Signature-256")
		if v == "" {
			return &signatureError{hookBadSignature, "no X-Hub-Signature-256 header"}
		}
		hexSig, ok := strings.CutPrefix(v, "sha256=")
		sig, err := hex.DecodeString(hexSig)
		if !ok || err != nil {
			return &signatureError{hookBadSignature, "X-Hub-Signature-256 is not sha256=HEX"}
		}
		if !hmac.Equal(sig, mac(h.Secret, body)) {
			return &signatureError{hookBadSignature, "X-Hub-Signature-256 does not match the body"}
		}
	case SchemeStripe:
		v := header.Get("Stripe-Signature")
		if v == "" {
			return &signatureError{hookBadSignature, "no Stripe-Signature header"}
		}
		t, sigs, err := parseStripeSignature(v)
		if err != nil {
			return &signatureError{hookBadSignature, "Stripe-Signature: " + err.Error()}
		}
		want := mac(h.Secret, []byte(strconv.FormatInt(t, 10)+"."), body)
		ok := false
		for _, sig := range sigs {
			// Every one is compared, so the time taken does not say
			// which matched.
			ok = hmac.Equal(sig, want) || ok
		}
		if !ok {
			return &signatureError{hookBadSignature, "no v1 signature of Stripe-Signature matches the body"}
		}
		if age := now.Sub(time.Unix(t, 0)); age > h.Tolerance || age < -h.Tolerance {
			return &signatureError{hookStale, fmt.Sprintf("Stripe-Signature timestamp %d is %s from the bus's clock, more than the tolerance %s", t, age.Round(time.Second), h.Tolerance)}
		}
	case SchemeHMAC:
		v := header.Get(h.Header)
		if v == "" {
			return &signatureError{hookBadSignature, "no " + h.Header + " header"}
		}
		encoded, ok := strings.CutPrefix(v, h.Prefix)
		var sig []byte
		var err error
		if h.Encoding == "base64" {
			sig, err = base64.StdEncoding.DecodeString(encoded)
		} else {
			sig, err = hex.DecodeString(encoded)
		}
		if !ok || err != nil {
			return &signatureError{hookBadSignature, fmt.Sprintf("%s is not %s and the %s HMAC", h.Header, strconv.Quote(h.Prefix), h.Encoding)}
		}
		if !hmac.Equal(sig, mac(h.Secret, body)) {
			return &signatureError{hookBadSignature, h.Header + " does not match the body"}
		}
	}
	return nil
}

// mac is the HMAC-SHA256 of the parts, concatenated, under secret.
func mac(secret []byte, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, secret)
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

// maxStripeSignatures bounds the v1 signatures of one header a request
// makes the bus compute against; Stripe sends one per active secret.
const maxStripeSignatures = 8

// parseStripeSignature reads "t=UNIX,v1=HEX,..." into the timestamp and
// the v1 signatures; other schemes (v0) are ignored, as Stripe says.
func parseStripeSignature(v string) (t int64, sigs [][]byte, err error) {
	seenT := false
	for item := range strings.SplitSeq(v, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok {
			return 0, nil, fmt.Errorf("item %q is not key=value", truncate(item, 32))
		}
		switch k {
		case "t":
			if seenT {
				return 0, nil, errors.New("t given twice")
			}
			seenT = true
			if t, err = strconv.ParseInt(val, 10, 64); err != nil || t <= 0 {
				return 0, nil, fmt.Errorf("t %q is not a Unix time", truncate(val, 32))
			}
		case "v1":
			if len(sigs) == maxStripeSignatures {
				return 0, nil, fmt.Errorf("more than %d v1 signatures", maxStripeSignatures)
			}
			sig, err := hex.DecodeString(val)
			if err != nil || len(sig) != sha256.Size {
				return 0, nil, errors.New("a v1 signature is not 64 hex digits")
			}
			sigs = append(sigs, sig)
		}
	}
	if !seenT {
		return 0, nil, errors.New("no t= timestamp")
	}
	if len(sigs) == 0 {
		return 0, nil, errors.New("no v1= signature")
	}
	return t, sigs, nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// hookPayloadType is the type of a hook's messages' payloads.
const hookPayloadType = "webhook"

// hookPayload is the payload of a hook's message: the request's body,
// as it came.
type hookPayload struct {
	Type string          `json:"type"`
	Body json.RawMessage `json:"body"`
}

// hookMeta is the meta of a hook's message.
type hookMeta struct {
	Webhook    string `json:"webhook"`
	DeliveryID string `json:"delivery_id,omitempty"`
}

// serveHook serves POST /v1/hooks/{name}.
func (wh *webhooks) serveHook(w http.ResponseWriter, r *http.Request) {
	count := func(outcome string) { wh.requests.WithLabelValues(outcome).Inc() }
	name := strings.TrimPrefix(r.URL.Path, PathHooks)
	h := wh.hooks[name]
	if h == nil {
		count(hookNotFound)
		httpjson.WriteError(w, http.StatusNotFound, protocol.Errorf(protocol.ErrInvalidParams, "no webhook is configured at %s", PathHooks+truncate(name, 64)))
		return
	}
	if r.Method != http.MethodPost {
		count(hookBadRequest)
		w.Header().Set("Allow", http.MethodPost)
		httpjson.WriteError(w, http.StatusMethodNotAllowed, protocol.Errorf(protocol.ErrMethodNotFound, "this path takes %s", http.MethodPost))
		return
	}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, h.MaxBodyBytes)); err != nil {
		if errors.As(err, new(*http.MaxBytesError)) {
			count(hookTooLarge)
			httpjson.WriteError(w, http.StatusRequestEntityTooLarge, protocol.Errorf(protocol.ErrLimitReached, "body is more than %d bytes", h.MaxBodyBytes))
			return
		}
		count(hookBadRequest)
		httpjson.WriteError(w, 0, protocol.Errorf(protocol.ErrParse, "read body: %v", err))
		return
	}
	body := buf.Bytes()
	if err := h.verify(r.Header, body, time.Now()); err != nil {
		var serr *signatureError
		errors.As(err, &serr)
		count(serr.outcome)
		wh.log.Warn("webhook refused: signature", "hook", h.Name, "remote", r.RemoteAddr, "why", serr.why)
		// The caller learns that the signature failed, not why: the why
		// is for the operator, in the log.
		w.Header().Set("WWW-Authenticate", `Signature realm="bub"`)
		httpjson.Write(w, http.StatusUnauthorized, httpjson.Error{Error: protocol.WireError(protocol.Errorf(protocol.ErrUnauthorized, "the request's signature is missing, malformed, stale or wrong for hook %q", h.Name))})
		return
	}
	if err := rpcstream.CheckUTF8("the body", body); err != nil {
		count(hookBadRequest)
		httpjson.WriteError(w, http.StatusBadRequest, err)
		return
	}
	params, deliveryID, err := h.message(r.Header, body)
	if err != nil {
		count(hookBadRequest)
		httpjson.WriteError(w, http.StatusBadRequest, err)
		return
	}
	var answer httpjson.Published
	publish := func() (*protocol.SendMessageResult, error) {
		pub, err := wh.bus.Publish(r.Context(), h.publisher, params, &bus.PublishOptions{Remote: r.RemoteAddr, Header: r.Header})
		if err != nil {
			return nil, err
		}
		answer.MessageID = pub.MessageID
		return &protocol.SendMessageResult{MessageID: pub.MessageID, Acks: []protocol.Ack{}}, nil
	}
	_, replayed, err := wh.once(h.Name, deliveryID, body, publish)
	if replayed {
		err = errReplay
	}
	switch {
	case errors.Is(err, errReplay), errors.Is(err, bus.ErrKeyReused):
		count(hookReplay)
		wh.log.Warn("webhook refused: request seen before", "hook", h.Name, "remote", r.RemoteAddr, "delivery_id", deliveryID)
		httpjson.WriteError(w, http.StatusConflict, protocol.Errorf(protocol.ErrInvalidParams, "hook %q took this signed body, or delivery id %q, before: a replay; nothing published", h.Name, deliveryID))
	case err != nil:
		count(hookRefused)
		httpjson.WriteError(w, 0, err)
	default:
		count(hookPublished)
		httpjson.Write(w, http.StatusCreated, answer)
	}
}

// errReplay is a request whose body, or delivery id with the same
// body, was seen before.
var errReplay = errors.New("delivery id seen before")

// message builds the sendMessage params of a request whose signature
// checked out, and names its delivery id ("" when the hook keeps none).
func (h *hook) message(header http.Header, body []byte) (params []byte, deliveryID string, err error) {
	if !json.Valid(body) {
		return nil, "", protocol.Errorf(protocol.ErrParse, "body is not JSON; a webhook's body becomes the message's payload")
	}
	var doc any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	_ = dec.Decode(&doc) // valid, checked above
	topic, err := h.topic.render(header, doc)
	if err != nil {
		return nil, "", protocol.Errorf(protocol.ErrInvalidParams, "topic of hook %q: %v", h.Name, err)
	}
	if h.deliveryID != nil {
		if deliveryID, err = h.deliveryID.render(header, doc); err != nil {
			return nil, "", protocol.Errorf(protocol.ErrInvalidParams, "delivery id of hook %q: %v", h.Name, err)
		}
	}
	// A payload is an object with a type (docs/PROTOCOL.md); the body,
	// whatever its shape, goes inside.
	params, err = json.Marshal(struct {
		Topic   string      `json:"topic"`
		Payload hookPayload `json:"payload"`
		Meta    hookMeta    `json:"meta"`
	}{topic, hookPayload{Type: hookPayloadType, Body: body}, hookMeta{Webhook: h.Name, DeliveryID: deliveryID}})
	if err != nil {
		return nil, "", protocol.Errorf(protocol.ErrInternal, "encode message: %v", err)
	}
	return params, deliveryID, nil
}
