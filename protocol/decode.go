package protocol

import (
	"encoding/json"
	"fmt"
	"reflect"

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
