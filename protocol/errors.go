package protocol

import (
	"errors"
	"fmt"
)

// JSON-RPC error codes. The first five are JSON-RPC 2.0's own; the rest
// are bub-bus's. docs/PROTOCOL.md lists every one with a wire example, and
// a test keeps the two in step.
const (
	CodeParseError     = -32700 // the frame is not valid JSON
	CodeInvalidRequest = -32600 // valid JSON that is not a JSON-RPC request
	CodeMethodNotFound = -32601 // no such method
	CodeInvalidParams  = -32602 // params missing, of the wrong type, or breaking a rule
	CodeInternalError  = -32603 // the bus failed; not the caller's fault

	CodeAlreadyInitialized   = -32001 // initialize sent twice on one connection
	CodeInvalidClientInfo    = -32002 // clientId or clientInfo breaks a rule
	CodeAlreadySubscribed    = -32003 // this connection already holds this pattern
	CodeSubscriptionNotFound = -32004 // unsubscribe of a pattern this connection does not hold
	CodeNotInitialized       = -32005 // a method other than initialize before initialize
	CodeTooManyRequests      = -32006 // the connection's in-flight request bound is reached
	CodeShuttingDown         = -32007 // the bus is draining and accepts no new work
	CodeNotFound             = -32008 // a dead-letter entry that does not exist
	CodeUnauthorized         = -32009 // no credential, or one the bus does not accept
	CodeForbidden            = -32010 // the credential does not allow this topic, clientId or method
	CodeLimitReached         = -32011 // a configured limit (pending messages, subscriptions, ...) is full
	CodeRateLimited          = -32012 // the connection publishes faster than its rate; data.retry_after_ms says how long to wait
)

// Error is a JSON-RPC error object. Handlers return errors that wrap one
// of the sentinels below with detail; CodeOf recovers the code.
type Error struct {
	Code    int64  `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

func (e *Error) Error() string {
	return e.Message
}

// RateLimitedData is the data of a CodeRateLimited error, and of a
// CodeLimitReached one that frees up in time: how long to wait before a
// retry. The HTTP doors say it in Retry-After too.
type RateLimitedData struct {
	RetryAfterMS int64 `json:"retry_after_ms"`
}

// Sentinels for the codes above, for wrapping with %w and matching with
// errors.Is.
var (
	ErrParse                = &Error{Code: CodeParseError, Message: "parse error"}
	ErrInvalidRequest       = &Error{Code: CodeInvalidRequest, Message: "invalid request"}
	ErrMethodNotFound       = &Error{Code: CodeMethodNotFound, Message: "method not found"}
	ErrInvalidParams        = &Error{Code: CodeInvalidParams, Message: "invalid params"}
	ErrInternal             = &Error{Code: CodeInternalError, Message: "internal error"}
	ErrAlreadyInitialized   = &Error{Code: CodeAlreadyInitialized, Message: "already initialized"}
	ErrInvalidClientInfo    = &Error{Code: CodeInvalidClientInfo, Message: "invalid client info"}
	ErrAlreadySubscribed    = &Error{Code: CodeAlreadySubscribed, Message: "already subscribed"}
	ErrSubscriptionNotFound = &Error{Code: CodeSubscriptionNotFound, Message: "subscription not found"}
	ErrNotInitialized       = &Error{Code: CodeNotInitialized, Message: "not initialized"}
	ErrTooManyRequests      = &Error{Code: CodeTooManyRequests, Message: "too many requests in flight"}
	ErrShuttingDown         = &Error{Code: CodeShuttingDown, Message: "bus is shutting down"}
	ErrNotFound             = &Error{Code: CodeNotFound, Message: "not found"}
	ErrUnauthorized         = &Error{Code: CodeUnauthorized, Message: "unauthorized"}
	ErrForbidden            = &Error{Code: CodeForbidden, Message: "forbidden"}
	ErrLimitReached         = &Error{Code: CodeLimitReached, Message: "limit reached"}
	ErrRateLimited          = &Error{Code: CodeRateLimited, Message: "rate limited"}
)

// Codes lists every code the bus sends, for documentation checks.
var Codes = []*Error{
	ErrParse, ErrInvalidRequest, ErrMethodNotFound, ErrInvalidParams, ErrInternal,
	ErrAlreadyInitialized, ErrInvalidClientInfo, ErrAlreadySubscribed,
	ErrSubscriptionNotFound, ErrNotInitialized, ErrTooManyRequests, ErrShuttingDown,
	ErrNotFound, ErrUnauthorized, ErrForbidden, ErrLimitReached, ErrRateLimited,
}

// Errorf wraps sentinel with a detail message: Errorf(ErrInvalidParams,
// "topic is required") reads "invalid params: topic is required".
func Errorf(sentinel *Error, format string, args ...any) error {
	return fmt.Errorf("%w: %s", sentinel, fmt.Sprintf(format, args...))
}

// CodeOf returns the JSON-RPC code an error carries, or CodeInternalError
// when it carries none.
func CodeOf(err error) int64 {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternalError
}

// WireError turns any error into the error object sent on the wire: the
// code from CodeOf and the whole error chain as the message, so the text
// names what was wrong.
func WireError(err error) *Error {
	var e *Error
	if errors.As(err, &e) && e == err {
		return e
	}
	return &Error{Code: CodeOf(err), Message: err.Error()}
}
