package a2a

import (
	"errors"
	"fmt"
)

// JSON-RPC error codes of A2A 1.0 (specification §5.4 and §9.5) and of
// JSON-RPC 2.0, the one table this package answers from.
const (
	CodeParseError             = -32700
	CodeInvalidRequest         = -32600
	CodeMethodNotFound         = -32601
	CodeInvalidParams          = -32602
	CodeInternalError          = -32603
	CodeTaskNotFound           = -32001
	CodeTaskNotCancelable      = -32002
	CodePushNotSupported       = -32003
	CodeUnsupportedOperation   = -32004
	CodeContentTypeUnsupported = -32005
	CodeInvalidAgentResponse   = -32006
	CodeExtendedCardMissing    = -32007
	CodeExtensionRequired      = -32008
	CodeVersionNotSupported    = -32009
)

// reasons are the ErrorInfo reasons sent in error.data, as §9.5 asks: an
// array of objects, each with an @type.
var reasons = map[int]string{
	CodeParseError:             "PARSE_ERROR",
	CodeInvalidRequest:         "INVALID_REQUEST",
	CodeMethodNotFound:         "METHOD_NOT_FOUND",
	CodeInvalidParams:          "INVALID_PARAMS",
	CodeInternalError:          "INTERNAL_ERROR",
	CodeTaskNotFound:           "TASK_NOT_FOUND",
	CodeTaskNotCancelable:      "TASK_NOT_CANCELABLE",
	CodePushNotSupported:       "PUSH_NOTIFICATION_NOT_SUPPORTED",
	CodeUnsupportedOperation:   "UNSUPPORTED_OPERATION",
	CodeContentTypeUnsupported: "CONTENT_TYPE_NOT_SUPPORTED",
	CodeInvalidAgentResponse:   "INVALID_AGENT_RESPONSE",
	CodeExtendedCardMissing:    "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
	CodeExtensionRequired:      "EXTENSION_SUPPORT_REQUIRED",
	CodeVersionNotSupported:    "VERSION_NOT_SUPPORTED",
}

// Error is a JSON-RPC error as this package answers it.
type Error struct {
	// Code is one of the Code constants.
	Code int `json:"code"`
	// Message says what was wrong and where.
	Message string `json:"message"`
	// Data is the array of typed details §9.5 asks for.
	Data []errorInfo `json:"data,omitempty"`
}

// errorInfo is a google.rpc.ErrorInfo detail.
type errorInfo struct {
	Type   string `json:"@type"`
	Reason string `json:"reason"`
	Domain string `json:"domain"`
}

func (e *Error) Error() string { return fmt.Sprintf("a2a error %d: %s", e.Code, e.Message) }

// errorf returns an *Error with code and a message naming the culprit.
func errorf(code int, format string, args ...any) *Error {
	e := &Error{Code: code, Message: fmt.Sprintf(format, args...)}
	if r, ok := reasons[code]; ok {
		e.Data = []errorInfo{{Type: "type.googleapis.com/google.rpc.ErrorInfo", Reason: r, Domain: "a2a-protocol.org"}}
	}
	return e
}

// asError returns err as an *Error; an error of another kind is an
// internal error, whose text stays in the log.
func asError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return errorf(CodeInternalError, "internal error; the server's log has the details")
}

// ErrClosed is returned by a Server's methods after Close.
var ErrClosed = errors.New("a2a: server closed")
