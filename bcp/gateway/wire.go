package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/bub-bus/bub/bcp"
)

// Topics of the gateway's contract.
const (
	TopicQuery    = "bcp:query"    // Controllers: bcp_query_request, bcp_session_start
	TopicResponse = "bcp:response" // Readers: bcp_response
)

// Message types, as docs/BCP.md names them.
const (
	TypeQueryRequest     = "bcp_query_request"
	TypeSessionStart     = "bcp_session_start"
	TypeQuery            = "bcp_query"
	TypeResponse         = "bcp_response"
	TypeValidationResult = "bcp_validation_result"
	TypeResponseDelivery = "bcp_response_delivery"
	TypeQueryFailed      = "bcp_query_failed"
)

// maxPayloadBytes bounds what the gateway decodes; the bus already caps a
// message at its maxMessageBytes, this keeps the gateway safe on its own.
const maxPayloadBytes = 2 << 20

// QueryRequest is a Controller's bcp_query_request: the target Reader, an
// optional justification, and the spec, whose keys (category, fields,
// questions, directive, max_words, requires_approval) sit beside them in
// the same object.
type QueryRequest struct {
	Target        string
	Justification string
	Spec          *bcp.Spec
}

// envelopeKeys are the keys of a bcp_query_request that are not the
// spec's.
var envelopeKeys = map[string]bool{"type": true, "target": true, "justification": true}

// DecodeQueryRequest decodes a bcp_query_request. A malformed envelope
// is a CodeMalformed error; a spec that breaks a rule is CodeInvalidSpec
// wrapping the bcp error. It never panics.
func DecodeQueryRequest(payload []byte) (*QueryRequest, error) {
	raw, err := decodeEnvelope(payload, TypeQueryRequest)
	if err != nil {
		return nil, err
	}
	var req QueryRequest
	if err := decodeString(raw, "target", &req.Target, true); err != nil {
		return nil, err
	}
	if err := decodeString(raw, "justification", &req.Justification, false); err != nil {
		return nil, err
	}
	// The spec is what is left: re-encoded so that package bcp's strict
	// decoder sees it, and rejects keys neither the envelope nor the spec
	// has.
	spec := make(map[string]json.RawMessage, len(raw))
	for k, v := range raw {
		if !envelopeKeys[k] {
			spec[k] = v
		}
	}
	data, err := json.Marshal(spec)
	if err != nil {
		return nil, &wireError{CodeMalformed, "spec: " + err.Error()}
	}
	s, err := bcp.ParseSpec(data)
	if err != nil {
		return nil, &wireError{CodeInvalidSpec, err.Error()}
	}
	req.Spec = s
	return &req, nil
}

// Response is a Reader's bcp_response: an answer to QueryID, or a publish
// against (Controller, SubscriptionID). Response is the raw answer, which
// only package bcp reads.
type Response struct {
	QueryID        string          `json:"query_id,omitempty"`
	SubscriptionID string          `json:"subscription_id,omitempty"`
	Controller     string          `json:"controller,omitempty"`
	Response       json.RawMessage `json:"response"`
}

// DecodeResponse decodes a bcp_response: exactly one of query_id and
// subscription_id (with controller), and a response object. It never
// panics.
func DecodeResponse(payload []byte) (*Response, error) {
	raw, err := decodeEnvelope(payload, TypeResponse)
	if err != nil {
		return nil, err
	}
	for k := range raw {
		switch k {
		case "type", "query_id", "subscription_id", "controller", "response":
		default:
			return nil, &wireError{CodeMalformed, fmt.Sprintf("unknown key %q in bcp_response", truncate(k))}
		}
	}
	var r Response
	for _, f := range []struct {
		key string
		dst *string
	}{{"query_id", &r.QueryID}, {"subscription_id", &r.SubscriptionID}, {"controller", &r.Controller}} {
		if err := decodeString(raw, f.key, f.dst, false); err != nil {
			return nil, err
		}
	}
	switch {
	case r.QueryID != "" && r.SubscriptionID != "":
		return nil, &wireError{CodeMalformed, "bcp_response has both query_id and subscription_id; send one"}
	case r.QueryID == "" && r.SubscriptionID == "":
		return nil, &wireError{CodeMalformed, "bcp_response has neither query_id nor subscription_id"}
	case r.SubscriptionID != "" && r.Controller == "":
		return nil, &wireError{CodeMalformed, "bcp_response with subscription_id needs controller"}
	case r.QueryID != "" && r.Controller != "":
		return nil, &wireError{CodeMalformed, "bcp_response with query_id takes no controller: the query names it"}
	}
	r.Response = raw["response"]
	if len(bytes.TrimSpace(r.Response)) == 0 {
		return nil, &wireError{CodeMalformed, "bcp_response has no response"}
	}
	if bytes.TrimSpace(r.Response)[0] != '{' {
		return nil, &wireError{CodeMalformed, "bcp_response's response is not a JSON object"}
	}
	return &r, nil
}

// decodeEnvelope decodes a message the gateway reads into its top-level
// members, with the strict decoder of package bcp: a duplicate key at any
// depth, invalid UTF-8 or data after the object is malformed, as in the
// spec and the response it carries (docs/BCP.md section 1).
func decodeEnvelope(payload []byte, what string) (map[string]json.RawMessage, error) {
	if len(payload) > maxPayloadBytes {
		return nil, &wireError{CodeMalformed, fmt.Sprintf("%s of %d bytes is over %d", what, len(payload), maxPayloadBytes)}
	}
	if err := bcp.CheckJSON(payload); err != nil {
		return nil, &wireError{CodeMalformed, what + ": " + bcpDetail(err)}
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(payload, &raw); err != nil || raw == nil {
		return nil, &wireError{CodeMalformed, what + " is not a JSON object"}
	}
	return raw, nil
}

// bcpDetail is a bcp error's detail, or the error's text.
func bcpDetail(err error) string {
	var e *bcp.Error
	if errors.As(err, &e) {
		return e.Detail
	}
	return err.Error()
}

// decodeString reads key of raw as a string; required says an absent or
// empty one is an error.
func decodeString(raw map[string]json.RawMessage, key string, dst *string, required bool) error {
	v, ok := raw[key]
	if ok {
		if err := json.Unmarshal(v, dst); err != nil {
			return &wireError{CodeMalformed, fmt.Sprintf("%s is not a string", key)}
		}
	}
	if required && *dst == "" {
		return &wireError{CodeMalformed, fmt.Sprintf("%s is missing", key)}
	}
	if len(*dst) > 256 {
		return &wireError{CodeMalformed, fmt.Sprintf("%s is longer than 256 bytes", key)}
	}
	return nil
}

// wireError is a refusal with its code; its text is what the ack says.
type wireError struct {
	code   string
	detail string
}

func (e *wireError) Error() string { return e.code + ": " + e.detail }

// codeOf returns the refusal code of err: a wireError's, a bcp error's, or
// CodeInternal.
func codeOf(err error) string {
	if we, ok := err.(*wireError); ok {
		return we.code
	}
	if c := bcp.CodeOf(err); c != "" {
		return string(c)
	}
	return CodeInternal
}

// truncate cuts a peer's string for an error message, so that a refusal
// cannot echo a large payload back.
func truncate(s string) string {
	const limit = 64
	if len(s) <= limit {
		return s
	}
	return s[:limit] + "…"
}

// Outgoing messages.

// QueryMessage is bcp_query, sent to agent:{reader}.
type QueryMessage struct {
	Type       string    `json:"type"`
	QueryID    string    `json:"query_id"`
	Controller string    `json:"controller"`
	Category   int       `json:"category"`
	Spec       *bcp.Spec `json:"spec"`
	ExpiresAt  string    `json:"expires_at"`
}

// ValidationResult is bcp_validation_result, sent to agent:{reader}.
type ValidationResult struct {
	Type           string `json:"type"`
	QueryID        string `json:"query_id,omitempty"`
	SubscriptionID string `json:"subscription_id,omitempty"`
	Success        bool   `json:"success"`
	Code           string `json:"code,omitempty"`
	Detail         string `json:"detail"`
}

// ResponseDelivery is bcp_response_delivery, sent to
// agent:{controller}. Response is the normalized form only.
type ResponseDelivery struct {
	Type           string          `json:"type"`
	QueryID        string          `json:"query_id,omitempty"`
	SubscriptionID string          `json:"subscription_id,omitempty"`
	Category       int             `json:"category"`
	FromAgent      string          `json:"from_agent"`
	Response       json.RawMessage `json:"response"`
	BandwidthBits  float64         `json:"bandwidth_bits"`
	Taint          string          `json:"taint"`
	Anomalies      []bcp.Anomaly   `json:"anomalies"`
}

// QueryFailed is bcp_query_failed, sent to agent:{controller}. It carries
// a code only: the detail of a rejection may quote the Reader.
type QueryFailed struct {
	Type    string `json:"type"`
	QueryID string `json:"query_id"`
	Code    string `json:"code"`
}
