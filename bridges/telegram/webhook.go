package telegram

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"net/http"

	"github.com/mymmrac/telego"
)

// secretHeader carries the webhook's secret_token on every request
// Telegram makes to it.
const secretHeader = "X-Telegram-Bot-Api-Secret-Token"

// maxUpdateBytes bounds a webhook request's body; updates are a few KB.
const maxUpdateBytes = 1 << 20

// setWebhook registers Options.WebhookURL with its secret, retrying while
// the Bot API cannot be reached.
func (b *Bridge) setWebhook(ctx context.Context) error {
	for attempt := 0; ; attempt++ {
		err := b.bot.SetWebhook(ctx, &telego.SetWebhookParams{URL: b.opts.WebhookURL, SecretToken: b.opts.WebhookSecret})
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return nil
		}
		if isUnauthorized(err) {
			return ErrTokenRefused
		}
		if class, _ := classify(err); class == classPermanent {
			return &transportError{msg: "setWebhook " + b.opts.WebhookURL + ": " + describe(err)}
		}
		b.log.Warn("setWebhook failed; retrying", "error", describe(err))
		if !sleep(ctx, retryWait(attempt, b.opts.retryMax)) {
			return nil
		}
	}
}

// ServeHTTP receives webhook updates; mount it at the path of
// Options.WebhookURL. Every request must carry the secret token, or it is
// refused (401 without one, 403 with a wrong one) and counted. An update
// is answered 200 once the bus has accepted it (or it was dropped); if
// the bus did not take it, the answer is 503 and Telegram sends it again
// later, when the update_id check keeps it from being forwarded twice.
func (b *Bridge) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	got := r.Header.Get(secretHeader)
	if subtle.ConstantTimeCompare([]byte(got), []byte(b.opts.WebhookSecret)) != 1 {
		b.metrics.webhookRefused.Inc()
		status := http.StatusForbidden
		if got == "" {
			status = http.StatusUnauthorized
		}
		b.log.Warn("webhook request refused: wrong or missing secret token", "remote", r.RemoteAddr, "status", status)
		http.Error(w, http.StatusText(status), status)
		return
	}
	if b.conn.Load() == nil {
		http.Error(w, "not connected to the bus yet", http.StatusServiceUnavailable)
		return
	}
	var u telego.Update
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxUpdateBytes)).Decode(&u); err != nil {
		http.Error(w, "not an update", http.StatusBadRequest)
		return
	}
	if err := b.handle(r.Context(), &u, true); err != nil {
		b.log.Warn("webhook update not accepted by the bus; Telegram will send it again", "update_id", u.UpdateID, "error", err)
		http.Error(w, "the bus did not accept the update", http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}
