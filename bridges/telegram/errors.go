package telegram

import (
	"context"
	"errors"
	"strings"
	"time"

	ta "github.com/mymmrac/telego/telegoapi"
)

// ErrNoToken is returned by New when Options.Token is empty.
var ErrNoToken = errors.New("telegram: no bot token (set BUB_TELEGRAM_TOKEN or --bot-token-file)")

// ErrTokenRefused is returned by Run when the Bot API answers 401 to the
// bot's first call: the token is wrong or revoked.
var ErrTokenRefused = errors.New("telegram: the Bot API refused the bot token (401 Unauthorized); check it with @BotFather")

// transportError is a failure to reach the Bot API or read its answer
// (network, HTTP 5xx, a body that is not JSON), with the token cut out of
// its text: Go's HTTP errors quote the URL, and the URL holds the token.
type transportError struct {
	msg string
	// ctx is the context's error when the call was cancelled, so that
	// errors.Is(err, context.Canceled) still works.
	ctx error
}

func (e *transportError) Error() string { return "telegram: " + e.msg }
func (e *transportError) Unwrap() error { return e.ctx }

// sendClass is what a failed Bot API call means for a delivery.
type sendClass int

const (
	// classRetry: transient (network, 5xx, timeout); retry with backoff.
	classRetry sendClass = iota
	// classRateLimited: 429; retry after retryAfter.
	classRateLimited
	// classMarkup: Telegram could not parse the text's markup; send it
	// again as plain text.
	classMarkup
	// classPermanent: Telegram will refuse this again (blocked, chat not
	// found, bad request); dead-letter it.
	classPermanent
)

// classify reads a Bot API error. retryAfter is set for classRateLimited.
func classify(err error) (class sendClass, retryAfter time.Duration) {
	var apiErr *ta.Error
	if !errors.As(err, &apiErr) {
		// A transport error, a cancelled or timed-out call: nothing
		// says Telegram refused the message.
		return classRetry, 0
	}
	switch code := apiErr.ErrorCode; {
	case code == 429:
		retryAfter = time.Second
		if apiErr.Parameters != nil && apiErr.Parameters.RetryAfter > 0 {
			retryAfter = time.Duration(apiErr.Parameters.RetryAfter) * time.Second
		}
		return classRateLimited, retryAfter
	case code >= 500:
		return classRetry, 0
	case code == 400 && isMarkupError(apiErr.Description):
		return classMarkup, 0
	default:
		// 400 chat not found, 403 bot was blocked or kicked, and every
		// other 4xx: sending the same request again gets the same
		// answer.
		return classPermanent, 0
	}
}

// isMarkupError recognises Telegram's answers to text whose parse_mode
// markup is broken ("Bad Request: can't parse entities: ...").
func isMarkupError(description string) bool {
	d := strings.ToLower(description)
	return strings.Contains(d, "can't parse entities") || strings.Contains(d, "can't find end") ||
		strings.Contains(d, "unsupported start tag") || strings.Contains(d, "unexpected end tag")
}

// isUnauthorized reports a 401 from the Bot API.
func isUnauthorized(err error) bool {
	var apiErr *ta.Error
	return errors.As(err, &apiErr) && apiErr.ErrorCode == 401
}

// describe returns err's text for a log or a delivery result: Telegram's
// own description when it answered, so that a dead letter says "Forbidden:
// bot was blocked by the user" rather than telego's wrapping.
func describe(err error) string {
	var apiErr *ta.Error
	if errors.As(err, &apiErr) {
		return apiErr.Description
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "the Bot API did not answer in time"
	}
	return err.Error()
}
