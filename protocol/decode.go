package protocol

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/bub-bus/bub/internal/jsonscan"
)

// ScanSendMessage reads sendMessage params in place, the bus's hot path:
// params must be a JSON object already checked as valid JSON (the bus's
// Stream checked the whole message), and Payload and Meta are slices of
// params, not copies. It accepts exactly what json.Unmarshal into
// SendMessageParams accepts: keys matched without regard to case, the
// last of duplicate keys winning, a null topic ignored. A topic that is
// not a string is a *json.UnmarshalTypeError naming the field, as
// json.Unmarshal reports it.
//
// payloadErr is what PayloadType says of the payload, found here so the
// payload is scanned once; the caller reports it in its turn, after the
// topic's checks.
func ScanSendMessage(params []byte) (p SendMessageParams, payloadErr, err error) {
	for key, value := range jsonscan.Members(params) {
		switch {
		case jsonscan.KeyIs(key, "topic"):
			if jsonscan.IsNull(value) {
				continue // json.Unmarshal leaves the field as it was
			}
			topic, ok := jsonscan.String(value)
			if !ok {
				// json.Unmarshal goes on after a type error and reports the first.
				if err == nil {
					err = &json.UnmarshalTypeError{Value: jsonscan.Kind(value), Type: reflect.TypeFor[string](), Field: "topic"}
				}
				continue
			}
			p.Topic = topic
		case jsonscan.KeyIs(key, "payload"):
			p.Payload = value
		case jsonscan.KeyIs(key, "meta"):
			p.Meta = value
		}
	}
	if err != nil {
		return SendMessageParams{}, nil, err
	}
	_, payloadErr = payloadType(p.Payload)
	return p, payloadErr, nil
}

// PayloadType returns the payload's "type", checking that the payload is a
// JSON object with a non-empty string type, as every payload must be.
func PayloadType(payload json.RawMessage) (string, error) {
	if len(payload) > 0 && IsObject(payload) {
		if err := json.Unmarshal(payload, &struct{}{}); err != nil {
			return "", fmt.Errorf("payload must be a JSON object: %v", err)
		}
	}
	raw, err := payloadType(payload)
	if err != nil {
		return "", err
	}
	typ, _ := jsonscan.String(raw)
	return typ, nil
}

// payloadType is PayloadType for a payload known to be valid JSON; it
// returns the type raw, quotes included, so that the bus's check needs
// no string.
func payloadType(payload []byte) ([]byte, error) {
	if len(payload) == 0 {
		return nil, fmt.Errorf("payload is required")
	}
	if !IsObject(payload) {
		return nil, fmt.Errorf("payload must be a JSON object with a string \"type\"")
	}
	var typ []byte
	for key, value := range jsonscan.Members(payload) {
		if jsonscan.KeyIs(key, "type") {
			typ = value
			if jsonscan.IsNull(value) {
				typ = nil // json.Unmarshal sets a pointer field to nil on null
			}
		}
	}
	switch {
	case typ == nil:
		return nil, fmt.Errorf("payload.type is required")
	case typ[0] != '"':
		return nil, fmt.Errorf("payload.type must be a string, got %s", typ)
	case len(typ) == 2:
		return nil, fmt.Errorf("payload.type must not be empty")
	}
	return typ, nil
}

// ScanProcessMessage reads processMessage params in place, a subscriber's
// hot path (the Go SDK's): params must be valid JSON (the Stream checked
// the whole message), and Payload and Meta are slices of params, not
// copies (capped at their length, so an append copies), so params must
// not be reused while they are kept. It accepts
// exactly what json.Unmarshal into ProcessMessageParams accepts, decodes
// to the same values and fails with the same *json.UnmarshalTypeError:
// keys matched without regard to case, the last of duplicate keys
// winning, a null string or number ignored, a null payload or meta kept
// as the bytes null, the first member of a wrong type named.
func ScanProcessMessage(params []byte) (p ProcessMessageParams, err error) {
	sc := fieldScanner{structName: "ProcessMessageParams"}
	if !sc.object(params, reflect.TypeFor[ProcessMessageParams]()) {
		return p, sc.err
	}
	for key, value := range jsonscan.Members(params) {
		switch {
		case jsonscan.KeyIs(key, "topic"):
			sc.string(value, "topic", &p.Topic)
		case jsonscan.KeyIs(key, "subscription"):
			sc.string(value, "subscription", &p.Subscription)
		case jsonscan.KeyIs(key, "messageId"):
			sc.string(value, "messageId", &p.MessageID)
		case jsonscan.KeyIs(key, "from"):
			sc.string(value, "from", &p.From)
		// Capped at their length, so that appending to one (a handler
		// may) copies it rather than writing over what follows it in
		// params.
		case jsonscan.KeyIs(key, "payload"):
			p.Payload = value[:len(value):len(value)]
		case jsonscan.KeyIs(key, "meta"):
			p.Meta = value[:len(value):len(value)]
		case jsonscan.KeyIs(key, "attempt"):
			sc.int(value, "attempt", &p.Attempt)
		}
	}
	if sc.err != nil {
		return ProcessMessageParams{}, sc.err
	}
	return p, nil
}

// ScanProcessMessageResult reads a subscriber's answer to processMessage
// in place, the bus's hot path: result must be valid JSON (the Stream
// checked the whole message). It accepts exactly what json.Unmarshal into
// ProcessMessageResult accepts, decodes to the same values and fails with
// the same *json.UnmarshalTypeError, as ScanProcessMessage does. Besides
// encoding/json's reflection, it saves the stack growth that
// strconv.ParseFloat's large frame causes on a delivery's young goroutine
// for every retry_seconds (docs/BENCHMARKS.md, "Decisions").
func ScanProcessMessageResult(result []byte) (r ProcessMessageResult, err error) {
	sc := fieldScanner{structName: "ProcessMessageResult"}
	if !sc.object(result, reflect.TypeFor[ProcessMessageResult]()) {
		return r, sc.err
	}
	for key, value := range jsonscan.Members(result) {
		switch {
		case jsonscan.KeyIs(key, "processed"):
			sc.bool(value, "processed", &r.Processed)
		case jsonscan.KeyIs(key, "should_retry"):
			sc.bool(value, "should_retry", &r.ShouldRetry)
		case jsonscan.KeyIs(key, "retry_seconds"):
			sc.float(value, "retry_seconds", &r.RetrySeconds)
		case jsonscan.KeyIs(key, "reject"):
			sc.bool(value, "reject", &r.Reject)
		case jsonscan.KeyIs(key, "message"):
			sc.string(value, "message", &r.Message)
		case jsonscan.KeyIs(key, "stopPropagation"):
			sc.bool(value, "stopPropagation", &r.StopPropagation)
		case jsonscan.KeyIs(key, "success"):
			sc.bool(value, "success", &r.Success)
		}
	}
	if sc.err != nil {
		return ProcessMessageResult{}, sc.err
	}
	return r, nil
}

// fieldScanner decodes the members of a struct, read with jsonscan, as
// json.Unmarshal decodes them: a null leaves the field as it was, and a
// value of the wrong type leaves it too, the first such one being the
// error json.Unmarshal returns after decoding the rest.
type fieldScanner struct {
	structName string
	err        error
	// text holds the document's strings, so that they cost one
	// allocation together rather than one each (a delivery has four, a
	// sendMessage result three and two per ack). A strings.Builder never
	// changes the bytes of a string it has handed out: when it grows, it
	// copies them to a new array and the strings keep the old one. It is
	// a value, so that it stays on the scanning goroutine's stack.
	text strings.Builder
}

// textChunk is the room fieldScanner.text takes at its first string:
// enough for a delivery's topic, subscription, message id and sender.
const textChunk = 128

// object checks that v, the whole document, is an object (or null, which
// json.Unmarshal accepts and decodes to nothing); false means there is
// nothing to read.
func (sc *fieldScanner) object(v []byte, t reflect.Type) bool {
	switch {
	case jsonscan.IsNull(v):
		return false
	case !IsObject(v):
		sc.err = &json.UnmarshalTypeError{Value: jsonscan.Kind(v), Type: t}
		return false
	}
	return true
}

func (sc *fieldScanner) typeError(value string, t reflect.Type, field string) {
	if sc.err == nil {
		sc.err = &json.UnmarshalTypeError{Value: value, Type: t, Struct: sc.structName, Field: field}
	}
}

func (sc *fieldScanner) string(v []byte, field string, dst *string) {
	if jsonscan.IsNull(v) {
		return
	}
	if inner, ok := jsonscan.Plain(v); ok {
		*dst = sc.keep(inner)
		return
	}
	if s, ok := jsonscan.String(v); ok {
		*dst = s
		return
	}
	sc.typeError(jsonscan.Kind(v), reflect.TypeFor[string](), field)
}

// keep returns b as a string held in sc.text.
func (sc *fieldScanner) keep(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if sc.text.Cap() == 0 {
		sc.text.Grow(max(textChunk, len(b)))
	}
	start := sc.text.Len()
	sc.text.Write(b)
	return sc.text.String()[start:]
}

func (sc *fieldScanner) bool(v []byte, field string, dst *bool) {
	switch string(v) {
	case "null":
	case "true":
		*dst = true
	case "false":
		*dst = false
	default:
		sc.typeError(jsonscan.Kind(v), reflect.TypeFor[bool](), field)
	}
}

func (sc *fieldScanner) int(v []byte, field string, dst *int) {
	switch kind := jsonscan.Kind(v); kind {
	case "null":
	case "number":
		// encoding/json parses an int field with ParseInt, so a
		// fraction or an exponent is a type error.
		n, err := strconv.ParseInt(string(v), 10, 0)
		if err != nil {
			sc.typeError("number "+string(v), reflect.TypeFor[int](), field)
			return
		}
		*dst = int(n)
	default:
		sc.typeError(kind, reflect.TypeFor[int](), field)
	}
}

func (sc *fieldScanner) float(v []byte, field string, dst *float64) {
	switch kind := jsonscan.Kind(v); kind {
	case "null":
	case "number":
		if f, ok := smallInteger(v); ok {
			*dst = f
			return
		}
		f, err := strconv.ParseFloat(string(v), 64)
		if err != nil {
			sc.typeError("number "+string(v), reflect.TypeFor[float64](), field)
			return
		}
		*dst = f
	default:
		sc.typeError(kind, reflect.TypeFor[float64](), field)
	}
}

// smallInteger returns the value of v, a JSON number, when it is a
// non-negative integer of at most 15 digits, which a float64 holds
// exactly (so ParseFloat would give the same): the common retry_seconds,
// read without strconv.ParseFloat, whose frame of over a kilobyte makes
// a young goroutine's stack grow, a copy of the whole stack.
func smallInteger(v []byte) (float64, bool) {
	if len(v) == 0 || len(v) > 15 {
		return 0, false
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return float64(n), true
}

// ScanSendMessageResult reads the bus's answer to sendMessage in place, a
// publisher's hot path (the Go SDK's): result must be valid JSON (the
// Stream checked the whole message). It accepts exactly what
// json.Unmarshal into SendMessageResult accepts and decodes to the same
// values, as ScanProcessMessage does; acks that are null decode to nil,
// as with json.Unmarshal.
func ScanSendMessageResult(result []byte) (r SendMessageResult, err error) {
	sc := fieldScanner{structName: "SendMessageResult"}
	if !sc.object(result, reflect.TypeFor[SendMessageResult]()) {
		return r, sc.err
	}
	for key, value := range jsonscan.Members(result) {
		switch {
		case jsonscan.KeyIs(key, "success"):
			sc.bool(value, "success", &r.Success)
		case jsonscan.KeyIs(key, "messageId"):
			sc.string(value, "messageId", &r.MessageID)
		case jsonscan.KeyIs(key, "acks"):
			sc.acks(value, &r.Acks)
		case jsonscan.KeyIs(key, "reason"):
			sc.string(value, "reason", &r.Reason)
		case jsonscan.KeyIs(key, "held"):
			sc.bool(value, "held", &r.Held)
		case jsonscan.KeyIs(key, "next_attempt"):
			sc.string(value, "next_attempt", &r.NextAttempt)
		}
	}
	if sc.err != nil {
		return SendMessageResult{}, sc.err
	}
	return r, nil
}

// acks decodes v into dst as json.Unmarshal decodes an array into a
// []Ack: null sets nil and an empty array an empty slice; otherwise each
// element is decoded into the slice's element at its index, reusing the
// backing array (so a key given twice merges, as with json.Unmarshal),
// a null element leaving it as it was.
func (sc *fieldScanner) acks(v []byte, dst *[]Ack) {
	switch kind := jsonscan.Kind(v); kind {
	case "null":
		*dst = nil
		return
	case "array":
	default:
		sc.typeError(kind, reflect.TypeFor[[]Ack](), "acks")
		return
	}
	// encoding/json names the innermost struct in a type error, and the
	// path from the outermost in its field. The acks are read with sc
	// itself, whose text they share, under the name Ack and with an
	// error of their own, the first among them.
	outer, outerErr := sc.structName, sc.err
	sc.structName, sc.err = "Ack", nil
	buf, n := *dst, 0
	for elem := range jsonscan.Elements(v) {
		if n == cap(buf) {
			buf = append(buf[:n], Ack{})
		}
		buf = buf[:n+1]
		switch kind := jsonscan.Kind(elem); kind {
		case "null":
		case "object":
			sc.ack(elem, &buf[n])
		default:
			if sc.err == nil {
				sc.err = &json.UnmarshalTypeError{Value: kind, Type: reflect.TypeFor[Ack](), Struct: outer, Field: "acks"}
			}
		}
		n++
	}
	if n == 0 {
		buf = []Ack{}
	}
	*dst = buf[:n]
	ackErr := sc.err
	sc.structName, sc.err = outer, outerErr
	if sc.err == nil {
		sc.err = ackErr
	}
}

// ack decodes the members of obj, an object, into a.
func (sc *fieldScanner) ack(obj []byte, a *Ack) {
	for key, value := range jsonscan.Members(obj) {
		switch {
		case jsonscan.KeyIs(key, "client_id"):
			sc.string(value, "acks.client_id", &a.ClientID)
		case jsonscan.KeyIs(key, "subscription"):
			sc.string(value, "acks.subscription", &a.Subscription)
		case jsonscan.KeyIs(key, "processed"):
			sc.bool(value, "acks.processed", &a.Processed)
		case jsonscan.KeyIs(key, "message"):
			sc.string(value, "acks.message", &a.Message)
		case jsonscan.KeyIs(key, "stopPropagation"):
			sc.bool(value, "acks.stopPropagation", &a.StopPropagation)
		case jsonscan.KeyIs(key, "error"):
			sc.string(value, "acks.error", &a.Error)
		case jsonscan.KeyIs(key, "retrying"):
			sc.bool(value, "acks.retrying", &a.Retrying)
		case jsonscan.KeyIs(key, "attempt"):
			sc.int(value, "acks.attempt", &a.Attempt)
		case jsonscan.KeyIs(key, "next_attempt"):
			sc.string(value, "acks.next_attempt", &a.NextAttempt)
		case jsonscan.KeyIs(key, "held"):
			sc.bool(value, "acks.held", &a.Held)
		case jsonscan.KeyIs(key, "dead_letter"):
			sc.string(value, "acks.dead_letter", &a.DeadLetter)
		}
	}
}
