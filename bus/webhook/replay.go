package webhook

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"

	"github.com/bub-bus/bub/protocol"
)

// Incoming webhooks' requests are remembered for
// bus.Options.IdempotencyWindow, so that a request sent again, by an
// attacker who caught it or by a sender retrying, publishes nothing.
// Each request is remembered twice: by a digest of its signed body, and
// by its delivery id when the hook names one. Most senders sign only the
// body (GitHub, HMAC), not the headers that carry the delivery id or the
// event's kind; so a captured request sent again with a new delivery id,
// or with another header to route it elsewhere, is the same signed body
// and is refused all the same. The records are idempotency keys of the
// hook (bus.Idempotently), kept in the store and so across restarts,
// and on a cluster shared by its nodes.

// hookIdentityPrefix begins the idempotency identity of a hook's
// requests: no credential's name holds a NUL, so none shares it, and
// the bus does not cap the keys of an identity that begins with one
// (bus.Idempotently): only requests signed with the hook's secret make
// them, and a refusal would lose the sender's events.
const hookIdentityPrefix = "\x00hook:"

// hookIdentity is the idempotency identity of hook's requests.
func hookIdentity(hook string) string { return hookIdentityPrefix + hook }

// bodyKeyPrefix begins the key a request's body digest is kept under; a
// delivery id is checked printable ASCII of at most 255 bytes, and may
// look the same, but then it is the same request's.
const bodyKeyPrefix = "body:"

// once runs publish unless hook took a request with the same body, or
// the delivery id id ("" for none), within the window, and returns its
// result. A repeat gets replayed set; the same id with another body gets
// bus.ErrKeyReused. A failed publish keeps nothing: the sender may try
// again.
func (w *webhooks) once(hook, id string, body []byte, publish func() (*protocol.SendMessageResult, error)) (*protocol.SendMessageResult, bool, error) {
	if id != "" {
		if err := protocol.CheckIdempotencyKey(id); err != nil {
			return nil, false, protocol.Errorf(protocol.ErrInvalidParams, "delivery id %q: %v", truncate(id, 64), err)
		}
	}
	sum := sha256.Sum256(body)
	keys := []string{bodyKeyPrefix + hex.EncodeToString(sum[:])}
	if id != "" {
		keys = append(keys, id)
	}
	// The body's key outside, the id's inside: a replay found by
	// the inner one fails the outer, which then keeps nothing.
	run := publish
	for _, key := range slices.Backward(keys[1:]) {
		inner := run
		run = func() (*protocol.SendMessageResult, error) {
			result, replayed, err := w.bus.Idempotently(hookIdentity(hook), key, sum[:], inner)
			if replayed {
				return nil, errReplay
			}
			return result, err
		}
	}
	result, replayed, err := w.bus.Idempotently(hookIdentity(hook), keys[0], sum[:], run)
	if errors.Is(err, errReplay) {
		return nil, true, nil
	}
	return result, replayed, err
}
