package protocol

import (
	"bytes"
	"encoding/json"
	"strings"
)

// Idempotency keys make a retried publish publish nothing
// (docs/PROTOCOL.md, "Idempotency-Key"): a door carries one in its own
// way (the HTTP API's Idempotency-Key header, a webhook's delivery id)
// or in sendMessage's meta.

// MaxIdempotencyKey bounds an idempotency key, in bytes.
const MaxIdempotencyKey = 255

// MetaIdempotencyKey is the field of sendMessage's meta that carries an
// idempotency key.
const MetaIdempotencyKey = "idempotency_key"

// CheckIdempotencyKey refuses a key that is empty, longer than
// MaxIdempotencyKey, or not printable ASCII.
func CheckIdempotencyKey(key string) error {
	if key == "" || len(key) > MaxIdempotencyKey || strings.ContainsFunc(key, func(r rune) bool { return r < 0x20 || r > 0x7e }) {
		return Errorf(ErrInvalidParams, "an idempotency key must be 1 to %d printable ASCII characters", MaxIdempotencyKey)
	}
	return nil
}

// IdempotencyKeyOf returns meta's idempotency key, "" when it has none
// or meta is no JSON object; a key that is no string or breaks
// CheckIdempotencyKey is refused.
func IdempotencyKeyOf(meta json.RawMessage) (string, error) {
	if len(meta) == 0 || !bytes.Contains(meta, []byte(MetaIdempotencyKey)) {
		return "", nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(meta, &fields); err != nil {
		return "", nil
	}
	raw, ok := fields[MetaIdempotencyKey]
	if !ok {
		return "", nil
	}
	var key string
	if err := json.Unmarshal(raw, &key); err != nil {
		return "", Errorf(ErrInvalidParams, "meta.%s must be a string", MetaIdempotencyKey)
	}
	if err := CheckIdempotencyKey(key); err != nil {
		return "", err
	}
	return key, nil
}
