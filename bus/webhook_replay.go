package bus

import (
	"crypto/sha256"
	"encoding/json"
	"sync"
	"time"

	"github.com/bub-bus/bub/protocol"
)

// hookReplays remembers the delivery ids the incoming webhooks took,
// for Options.IdempotencyWindow, so that a request sent again, by an
// attacker who caught it or by a sender retrying, publishes nothing.
// They are idempotency keys of the hook (idempotency.go), kept in the
// store and so across restarts; a store that keeps none (a cluster's)
// leaves them to memory here, per node, bounded by maxMemoryReplays.
type hookReplays struct {
	// mu guards the fields below.
	mu sync.Mutex
	// seen are the ids in memory, by hook and id, with when they
	// expire; order lists them oldest first, for pruning.
	seen  map[string]time.Time
	order []string
}

// maxMemoryReplays bounds the delivery ids kept in memory; beyond it
// the oldest are forgotten first.
const maxMemoryReplays = 100_000

// hookIdentity is the idempotency identity of a hook's delivery ids: no
// credential's name holds a NUL, so none shares it.
func hookIdentity(hook string) string { return "\x00hook:" + hook }

// once runs publish unless hook took id before, and returns its answer.
// A repeat gets replayed set; the same id with another body gets
// errKeyReused. A failed publish keeps no id: the sender may try again.
func (rp *hookReplays) once(s *Server, hook, id string, body []byte, publish func() (any, error)) (json.RawMessage, bool, error) {
	if err := checkIdempotencyKey(id); err != nil {
		return nil, false, protocol.Errorf(protocol.ErrInvalidParams, "delivery id %q: %v", truncate(id, 64), err)
	}
	sum := sha256.Sum256(body)
	if s.idempotent != nil {
		return s.idempotently(hookIdentity(hook), id, sum[:], publish)
	}
	key := hook + "\x00" + id
	now := time.Now()
	rp.mu.Lock()
	rp.pruneLocked(now)
	if _, ok := rp.seen[key]; ok {
		rp.mu.Unlock()
		return nil, true, nil
	}
	if rp.seen == nil {
		rp.seen = make(map[string]time.Time)
	}
	// Taken before publishing, so that two copies sent at once publish
	// once.
	rp.seen[key] = now.Add(s.opts.IdempotencyWindow)
	rp.order = append(rp.order, key)
	rp.mu.Unlock()
	answer, err := publish()
	if err != nil {
		rp.mu.Lock()
		delete(rp.seen, key)
		rp.mu.Unlock()
		return nil, false, err
	}
	b, err := json.Marshal(answer)
	return b, false, err
}

// pruneLocked forgets the expired ids, and the oldest beyond the bound.
// Every id has the same lifetime, so order is also expiry order.
func (rp *hookReplays) pruneLocked(now time.Time) {
	for len(rp.order) > 0 {
		key := rp.order[0]
		exp, ok := rp.seen[key]
		full := len(rp.order) >= maxMemoryReplays
		if ok && now.Before(exp) && !full {
			break
		}
		if ok {
			delete(rp.seen, key)
		}
		rp.order = rp.order[1:]
	}
}
