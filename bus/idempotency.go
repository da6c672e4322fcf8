package bus

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/protocol"
)

// Idempotency keys make a retried publish publish nothing: the first
// answer is kept in the store per identity and key for
// Options.IdempotencyWindow, and a repeat of the same request gets it
// again (docs/PROTOCOL.md, "Idempotency-Key").

// ErrKeyReused says an idempotency key was used within the window for
// another request (409 over HTTP): Publish's error is a protocol error
// that errors.Is finds to be ErrKeyReused too.
var ErrKeyReused = errors.New("idempotency key already used for another request")

// addOnIdentityPrefix begins the idempotency identities of add-ons
// (Idempotently): no credential's name holds a NUL, so none shares one.
const addOnIdentityPrefix = "\x00"

// keyConflict is a protocol error that is ErrKeyReused too, whose text
// is the protocol error's alone.
type keyConflict struct{ err error }

func (e *keyConflict) Error() string        { return e.err.Error() }
func (e *keyConflict) Unwrap() error        { return e.err }
func (e *keyConflict) Is(target error) bool { return target == ErrKeyReused }

// IdempotencyStore is the part of Store that keeps idempotency keys and
// counts each identity's records: the bus caps them
// (Limits.MaxIdempotencyKeysPerIdentity), and their bytes count against
// the identity's stored bytes (PendingUsage includes them). Both
// *store.Store (one node) and *cluster.Store (JetStream, every node's
// keys in one bucket) keep them; the methods mean what *store.Store's
// say. A repeat on any node that shares the store gets the first answer.
type IdempotencyStore interface {
	GetIdempotent(identity, key string, now time.Time) (*store.Idempotent, error)
	PutIdempotent(identity, key string, rec *store.Idempotent, now time.Time) error
	// IdempotentUsage returns what identity's records take; the bus
	// asks it for every new key, so it must not scan the store.
	IdempotentUsage(identity string) (store.Usage, error)
	// PruneIdempotent drops identity's expired records and says when
	// the first of the others expires.
	PruneIdempotent(identity string, now time.Time) (time.Time, error)
}

// IdempotencyReserver is an IdempotencyStore that reserves a key for
// the request that runs it. A cluster's store does, as the bus cannot
// serialize in memory the requests of one key that several nodes take;
// a single node's reserves nothing (localKeys), as keyLocks serialize
// them.
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

// localKeys are the idempotency keys of a single node, whose requests
// with one key keyLocks serialize: reserving a key is reading it.
type localKeys struct{ IdempotencyStore }

func (k localKeys) ReserveIdempotent(identity, key string, now time.Time) (*store.Idempotent, error) {
	return k.GetIdempotent(identity, key, now)
}

// ReleaseIdempotent does nothing: nothing was reserved.
func (localKeys) ReleaseIdempotent(string, string) {}

// ErrIdempotencyBusy: a request with the idempotency key is running on
// another node (IdempotencyReserver.ReserveIdempotent).
var ErrIdempotencyBusy = errors.New("a request with this idempotency key is running on another node")

// Idempotently runs publish once for identity's key within
// Options.IdempotencyWindow: it returns publish's result and keeps a
// bounded copy of it (boundedResult) in the store, on a cluster shared
// by its nodes; a repeat whose request has the same sum gets the kept
// copy (replayed) and publish does not run; one with another sum is
// ErrKeyReused. Requests with one key run one at a time. An error is
// not kept: a retry runs again. A new key is refused while identity
// holds MaxIdempotencyKeysPerIdentity (keyRoom); the bytes of its
// records count against its stored-bytes cap with its messages', which
// admitPublish applies. An identity that begins with a NUL byte, which
// no credential's name holds, is an add-on's own, whose keys it bounds
// itself: keyRoom does not cap them.
func (s *Server) Idempotently(identity, key string, sum []byte, publish func() (*protocol.SendMessageResult, error)) (result *protocol.SendMessageResult, replayed bool, err error) {
	if err := protocol.CheckIdempotencyKey(key); err != nil {
		return nil, false, err
	}
	unlock := s.keyLocks.Lock(identity + "\x00" + key)
	defer unlock()
	now := time.Now()
	rec, err := s.keys.ReserveIdempotent(identity, key, now)
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
		var kept protocol.SendMessageResult
		if err := json.Unmarshal(rec.Answer, &kept); err != nil {
			return nil, false, protocol.Errorf(protocol.ErrInternal, "idempotency key %q: its kept result does not decode: %v", key, err)
		}
		if kept.Acks == nil {
			kept.Acks = []protocol.Ack{}
		}
		return &kept, true, nil
	}
	err = s.keyRoom(identity, now)
	if err == nil {
		result, err = publish()
	}
	if err != nil {
		s.keys.ReleaseIdempotent(identity, key)
		return nil, false, err
	}
	b, err := json.Marshal(boundedResult(result))
	if err != nil {
		return nil, false, protocol.Errorf(protocol.ErrInternal, "encode answer: %v", err)
	}
	err = s.keys.PutIdempotent(identity, key, &store.Idempotent{BodyHash: sum, Answer: b, Expires: now.Add(s.opts.IdempotencyWindow)}, now)
	if err != nil {
		// Published but not recorded: a retry would publish again.
		s.log.Error("idempotency key not recorded; a retry will publish again", "identity", identity, "err", err)
	}
	return result, false, nil
}

// boundedResult is what an idempotency record keeps of a publish's
// result: the message id and the outcome, never what subscribers
// answered (their acks' messages), which a subscriber could make as
// large as a message to fill the store on its publisher's keys.
func boundedResult(r *protocol.SendMessageResult) *protocol.SendMessageResult {
	return &protocol.SendMessageResult{
		Success: r.Success, MessageID: r.MessageID, Acks: []protocol.Ack{},
		Reason: r.Reason, Held: r.Held, NextAttempt: r.NextAttempt,
	}
}

// pruneKeys drops identity's expired idempotency records, and reports
// whether that freed any bytes.
func (s *Server) pruneKeys(identity string) bool {
	before, err := s.store.IdempotentUsage(identity)
	if err != nil || before.Entries == 0 {
		return false
	}
	if _, err := s.store.PruneIdempotent(identity, time.Now()); err != nil {
		s.log.Error("expired idempotency keys not dropped", "identity", identity, "err", err)
		return false
	}
	after, err := s.store.IdempotentUsage(identity)
	return err == nil && after.Bytes < before.Bytes
}

// keyRoom refuses a new idempotency key of identity when it holds
// MaxIdempotencyKeysPerIdentity within the window, after dropping those
// that expired; the refusal says when the oldest frees its place. An
// add-on's keys (addOnIdentityPrefix) are not capped: an incoming
// webhook's, say, are made only by requests signed with its secret, two
// per request, at the rate its sender chooses, and a refusal would lose
// the sender's events.
func (s *Server) keyRoom(identity string, now time.Time) error {
	bound := s.limits().MaxIdempotencyKeysPerIdentity
	if bound < 0 || strings.HasPrefix(identity, addOnIdentityPrefix) {
		return nil
	}
	u, err := s.store.IdempotentUsage(identity)
	if err != nil {
		return protocol.Errorf(protocol.ErrInternal, "count idempotency keys: %v", err)
	}
	if u.Entries < bound {
		return nil
	}
	next, err := s.store.PruneIdempotent(identity, now)
	if err != nil {
		return protocol.Errorf(protocol.ErrInternal, "drop expired idempotency keys: %v", err)
	}
	if u, err = s.store.IdempotentUsage(identity); err != nil || u.Entries < bound {
		return err
	}
	s.limitState.refused[limitKeysPerIdentity].Inc()
	ms := max(1, next.Sub(now).Milliseconds())
	return &protocol.Error{
		Code:    protocol.CodeLimitReached,
		Message: fmt.Sprintf("%s: %s: identity %q holds %d idempotency keys within the window, its limit %d; retry after %d ms, when the oldest expires", protocol.ErrLimitReached.Message, limitKeysPerIdentity, identity, u.Entries, bound, ms),
		Data:    protocol.RateLimitedData{RetryAfterMS: ms},
	}
}

// idempotencySum is the sum that tells a repeat of params from another
// request with the same key.
func idempotencySum(params []byte) []byte {
	sum := sha256.Sum256(params)
	return sum[:]
}
