// Package httpjson answers the bus's HTTP requests in JSON, as every HTTP
// door of the bus does (docs/PROTOCOL.md, "HTTP binding"): a result with
// its status, or an error as {"error": ...}, the JSON-RPC error object the
// WebSocket API would answer, with the HTTP status of its code.
package httpjson

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/bub-bus/bub/protocol"
)

// Error is the body of an error answer.
type Error struct {
	Error *protocol.Error `json:"error"`
}

// Status is the HTTP status of a JSON-RPC error code.
func Status(code int64) int {
	switch code {
	case protocol.CodeUnauthorized:
		return http.StatusUnauthorized
	case protocol.CodeForbidden:
		return http.StatusForbidden
	case protocol.CodeRateLimited, protocol.CodeTooManyRequests, protocol.CodeLimitReached:
		return http.StatusTooManyRequests
	case protocol.CodeShuttingDown:
		return http.StatusServiceUnavailable
	case protocol.CodeInternalError:
		return http.StatusInternalServerError
	default:
		return http.StatusBadRequest
	}
}

// WriteError answers err as JSON with status, or with its code's status
// when status is 0. A 429 or 503 says when to retry in Retry-After (the
// error's protocol.RateLimitedData, else a second); a 401 asks for a
// bearer token in WWW-Authenticate.
func WriteError(w http.ResponseWriter, status int, err error) {
	perr := protocol.WireError(err)
	if status == 0 {
		status = Status(perr.Code)
	}
	if status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable {
		retry := int64(1)
		if d, ok := perr.Data.(protocol.RateLimitedData); ok {
			retry = max(1, (d.RetryAfterMS+999)/1000)
		}
		w.Header().Set("Retry-After", strconv.FormatInt(retry, 10))
	}
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="bub"`)
	}
	Write(w, status, Error{Error: perr})
}

// Write answers v as JSON with status.
func Write(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// MethodNotAllowed answers 405 naming the methods allowed ("GET, HEAD").
func MethodNotAllowed(w http.ResponseWriter, allow string) {
	w.Header().Set("Allow", allow)
	WriteError(w, http.StatusMethodNotAllowed, protocol.Errorf(protocol.ErrMethodNotFound, "this path takes %s", allow))
}

// Published is the body of a 201 to a publish (the HTTP API's, a
// webhook's): the message's id and, when the caller waited for it,
// sendMessage's result.
type Published struct {
	MessageID string                      `json:"messageId"`
	Result    *protocol.SendMessageResult `json:"result,omitempty"`
}
