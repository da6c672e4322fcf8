package bus

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/protocol"
)

// Idempotency keys make a retried publish publish nothing: the first
// answer is kept in the store per identity and key for
// Options.IdempotencyWindow, and a repeat of the same request gets it
// again (docs/PROTOCOL.md, "Idempotency-Key").

// maxIdempotencyKey bounds an idempotency key.
const maxIdempotencyKey = 255

// metaIdempotencyKey is the meta field of sendMessage that carries a key.
const metaIdempotencyKey = "idempotency_key"

// errKeyReused says a key was used within the window for another request.
var errKeyReused = errors.New("idempotency key already used for another request")

// keyConflict is a protocol error that is errKeyReused too (409 over
// HTTP), whose text is the protocol error's alone.
type keyConflict struct{ err error }

func (e *keyConflict) Error() string        { return e.err.Error() }
func (e *keyConflict) Unwrap() error        { return e.err }
func (e *keyConflict) Is(target error) bool { return target == errKeyReused }

// IdempotencyStore is a Store that keeps idempotency keys, which a
// Store may do: without it the bus refuses a publish with a key. Both
// *store.Store (one node) and *cluster.Store (JetStream, every node's
// keys in one bucket) keep them; the methods mean what *store.Store's
// say. A repeat on any node that shares the store gets the first answer.
type IdempotencyStore interface {
	GetIdempotent(identity, key string, now time.Time) (*store.Idempotent, error)
	PutIdempotent(identity, key string, rec *store.Idempotent, now time.Time) error
}

var _ IdempotencyStore = (*store.Store)(nil)

// IdempotencyReserver is an IdempotencyStore shared by several nodes,
// whose requests with one key the bus cannot serialize in memory: the
// store does, by reserving the key for the request that runs it.
type IdempotencyReserver interface {
	IdempotencyStore
	// ReserveIdempotent is GetIdempotent, but when the key is free it
	// also reserves it for the caller, until its PutIdempotent or
	// ReleaseIdempotent (or an expiry, should the node die). A key
	// another node reserved is ErrIdempotencyBusy.
	ReserveIdempotent(identity, key string, now time.Time) (*store.Idempotent, error)
	// ReleaseIdempotent frees the caller's reservation: the request
	// failed, and a retry must run again.
	ReleaseIdempotent(identity, key string)
}

// ErrIdempotencyBusy: a request with the idempotency key is running on
// another node (IdempotencyReserver.ReserveIdempotent).
var ErrIdempotencyBusy = errors.New("a request with this idempotency key is running on another node")

// checkIdempotencyKey refuses a key that is empty, too long, or not
// printable ASCII.
func checkIdempotencyKey(key string) error {
	if key == "" || len(key) > maxIdempotencyKey || strings.ContainsFunc(key, func(r rune) bool { return r < 0x20 || r > 0x7e }) {
		return protocol.Errorf(protocol.ErrInvalidParams, "an idempotency key must be 1 to %d printable ASCII characters", maxIdempotencyKey)
	}
	return nil
}

// idempotently runs publish once for identity's key within the window:
// it returns publish's answer, as JSON, and keeps it; a repeat whose
// request has the same sum gets the kept answer (replayed) and publish
// does not run; one with another sum is errKeyReused. Requests with one
// key run one at a time. An error is not kept: a retry runs again.
func (s *Server) idempotently(identity, key string, sum []byte, publish func() (any, error)) (answer json.RawMessage, replayed bool, err error) {
	if err := checkIdempotencyKey(key); err != nil {
		return nil, false, err
	}
	if s.idempotent == nil {
		return nil, false, protocol.Errorf(protocol.ErrInvalidParams, "this bus's store keeps no idempotency keys; publish without one")
	}
	unlock := s.http.lockKey(identity + "\x00" + key)
	defer unlock()
	now := time.Now()
	get := s.idempotent.GetIdempotent
	reserver, shared := s.idempotent.(IdempotencyReserver)
	if shared {
		get = reserver.ReserveIdempotent
	}
	rec, err := get(identity, key, now)
	if errors.Is(err, ErrIdempotencyBusy) {
		return nil, false, &keyConflict{protocol.Errorf(protocol.ErrInvalidParams, "idempotency key %q: %v; retry once it answered", key, err)}
	}
	if err != nil {
		return nil, false, protocol.Errorf(protocol.ErrInternal, "read idempotency key: %v", err)
	}
	if rec != nil {
		if !bytes.Equal(rec.BodyHash, sum) {
			return nil, false, &keyConflict{protocol.Errorf(protocol.ErrInvalidParams, "idempotency key %q was used for another request within the idempotency window; use a new key", key)}
		}
		return rec.Answer, true, nil
	}
	result, err := publish()
	if err != nil {
		if shared {
			reserver.ReleaseIdempotent(identity, key)
		}
		return nil, false, err
	}
	b, err := json.Marshal(result)
	if err != nil {
		return nil, false, protocol.Errorf(protocol.ErrInternal, "encode answer: %v", err)
	}
	err = s.idempotent.PutIdempotent(identity, key, &store.Idempotent{BodyHash: sum, Answer: b, Expires: now.Add(s.opts.IdempotencyWindow)}, now)
	if err != nil {
		// Published but not recorded: a retry would publish again.
		s.log.Error("idempotency key not recorded; a retry will publish again", "identity", identity, "err", err)
	}
	return b, false, nil
}

// idempotencyKeyOf returns meta's idempotency_key, "" when it has none.
func idempotencyKeyOf(meta json.RawMessage) (string, error) {
	if len(meta) == 0 || !bytes.Contains(meta, []byte(metaIdempotencyKey)) {
		return "", nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(meta, &fields); err != nil {
		return "", nil
	}
	raw, ok := fields[metaIdempotencyKey]
	if !ok {
		return "", nil
	}
	var key string
	if err := json.Unmarshal(raw, &key); err != nil {
		return "", protocol.Errorf(protocol.ErrInvalidParams, "meta.%s must be a string", metaIdempotencyKey)
	}
	if err := checkIdempotencyKey(key); err != nil {
		return "", err
	}
	return key, nil
}

// idempotencySum is the sum that tells a repeat of params from another
// request with the same key.
func idempotencySum(params []byte) []byte {
	sum := sha256.Sum256(params)
	return sum[:]
}

// lockKey serializes the requests with one idempotency key and returns
// the unlock.
func (h *httpPublishers) lockKey(k string) func() {
	h.mu.Lock()
	if h.keys == nil {
		h.keys = make(map[string]*keyLock)
	}
	l := h.keys[k]
	if l == nil {
		l = &keyLock{}
		h.keys[k] = l
	}
	l.users++
	h.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		h.mu.Lock()
		if l.users--; l.users == 0 {
			delete(h.keys, k)
		}
		h.mu.Unlock()
	}
}

// keyLock is the lock of one idempotency key, with the requests using it.
type keyLock struct {
	mu    sync.Mutex
	users int
}
