package bus

import (
	"net/http"

	"github.com/bub-bus/bub/internal/httpjson"
)

// The JSON answers of the HTTP doors still in package bus (the journal,
// webhooks, tool callbacks, the console): package httpjson's, which the
// add-ons outside bus call themselves. This file goes with the last of
// them.

// httpError is the body of an HTTP error answer.
type httpError = httpjson.Error

// publishAnswer is the body of a 201 to a publish.
type publishAnswer = httpjson.Published

// writeError answers err as JSON with status (0: its code's).
func writeError(w http.ResponseWriter, status int, err error) { httpjson.WriteError(w, status, err) }

// writeJSON answers v as JSON with status.
func writeJSON(w http.ResponseWriter, status int, v any) { httpjson.Write(w, status, v) }

// methodNotAllowed answers 405 naming the methods allowed.
func methodNotAllowed(w http.ResponseWriter, allow string) { httpjson.MethodNotAllowed(w, allow) }
