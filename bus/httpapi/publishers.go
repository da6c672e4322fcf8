package httpapi

import (
	"container/list"
	"sync"

	"github.com/bub-bus/bub/bus"
)

// publishers are the publishers HTTP publishes go through, one per
// identity and clientId, so that the publisher's order holds across
// requests as on one WebSocket. An identity keeps at most
// Limits.MaxHTTPPublishersPerIdentity of them, and the API
// maxPublishers: beyond either, the least recently used is forgotten
// (its next request makes it again), never all at once. The publish
// rate is the identity's, not a publisher's (bus/limits.go), so
// forgetting one refills no bucket.
//
// Two recency lists, every publisher's and each identity's, make both
// bounds' evictions O(1).
type publishers struct {
	// mu guards the fields below. It is taken alone.
	mu sync.Mutex
	by map[publisherKey]*kept
	// all holds every kept publisher, and mine[identity] that identity's,
	// the most recently used first.
	all  list.List
	mine map[string]*list.List
}

// publisherKey names an HTTP publisher: the identity (its limit key, ""
// on an open bus) and the clientId.
type publisherKey struct{ identity, clientID string }

// kept is a publisher with its places in the recency lists.
type kept struct {
	key      publisherKey
	p        *bus.Publisher
	inAll    *list.Element
	inMine   *list.Element
	identity *list.List
}

// maxPublishers bounds the publishers the API keeps in all.
const maxPublishers = 4096

// get returns the publisher kept for key, the most recently used now,
// or keeps one made by fresh; an identity past perIdentity (negative:
// no bound), or the table past maxPublishers, forgets its least
// recently used first.
func (h *publishers) get(key publisherKey, perIdentity int, fresh func() *bus.Publisher) *bus.Publisher {
	h.mu.Lock()
	defer h.mu.Unlock()
	if k := h.by[key]; k != nil {
		h.all.MoveToFront(k.inAll)
		k.identity.MoveToFront(k.inMine)
		return k.p
	}
	if h.by == nil {
		h.by = make(map[publisherKey]*kept)
		h.mine = make(map[string]*list.List)
	}
	if mine := h.mine[key.identity]; mine != nil && perIdentity >= 0 && mine.Len() >= perIdentity {
		h.forgetLocked(mine.Back().Value.(*kept))
	} else if len(h.by) >= maxPublishers {
		h.forgetLocked(h.all.Back().Value.(*kept))
	}
	// After the eviction, which drops an identity's list once empty.
	mine := h.mine[key.identity]
	if mine == nil {
		mine = list.New()
		h.mine[key.identity] = mine
	}
	k := &kept{key: key, p: fresh(), identity: mine}
	k.inAll = h.all.PushFront(k)
	k.inMine = mine.PushFront(k)
	h.by[key] = k
	return k.p
}

// forgetLocked forgets k. The caller holds h.mu.
func (h *publishers) forgetLocked(k *kept) {
	delete(h.by, k.key)
	h.all.Remove(k.inAll)
	k.identity.Remove(k.inMine)
	if k.identity.Len() == 0 {
		delete(h.mine, k.key.identity)
	}
}
