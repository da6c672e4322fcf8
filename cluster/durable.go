package cluster

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bub-bus/bub/bus/store"
)

// Durable subscriptions (docs/PROTOCOL.md, "Durable subscriptions";
// docs/CLUSTER.md) live in three places on a cluster:
//
//   - their owners' records in BUB_DURABLE, one key per clientId
//     (clientKey), the record *store.Store writes (store.EncodeDurable),
//     changed only by compare-and-set (UpdateDurable), so that two nodes
//     changing one owner at once (its unsubscribe here, an operator's
//     subscriptions.remove there) both count;
//   - each subscription in the order, BUB_SUBS, under its owner's key
//     (DurableKey, PutDurableSubscription);
//   - the messages held for an away owner in BUB_PENDING, under the node
//     that held them, marked with the owner (headerHeldFor), which the
//     node the owner comes back to moves to itself (TakeHeld).

// durableTries bounds UpdateDurable's compare-and-set tries: each lost
// one means another node changed the owner in between, which does not
// go on for long.
const durableTries = 8

// UpdateDurable applies change to clientID's owner record as the
// bucket's leader has it (an empty record when there is none) and
// stores the result, once a majority has it: an owner left with neither
// subscriptions nor a waker is removed. It returns the record stored and
// its revision, which WatchDurable's later changes exceed.
func (s *Store) UpdateDurable(clientID string, change func(*store.DurableOwner)) (*store.DurableOwner, uint64, error) {
	rec, rev, err := s.updateDurable(clientID, change)
	if err != nil {
		return nil, 0, fmt.Errorf("cluster: update durable subscriptions of %q: %w", clientID, s.n.explain(err))
	}
	return rec, rev, nil
}

func (s *Store) updateDurable(clientID string, change func(*store.DurableOwner)) (*store.DurableOwner, uint64, error) {
	key := clientKey(clientID)
	subject := kvSubject(bucketDurable, key)
	for range durableTries {
		ctx, cancel, err := s.writeContext()
		if err != nil {
			return nil, 0, err
		}
		rec := &store.DurableOwner{ClientID: clientID}
		data, rev, err := s.leaderGetSeq(ctx, bucketDurable, subject)
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil:
			cancel()
			return nil, 0, err
		default:
			if rec, err = store.DecodeDurable(clientID, data); err != nil {
				cancel()
				return nil, 0, err
			}
		}
		change(rec)
		rec.ClientID = clientID
		var stored uint64
		if len(rec.Subscriptions) == 0 && rec.Waker == "" {
			stored, err = s.n.deleteKey(ctx, bucketDurable, key, rev)
		} else if data, err = store.EncodeDurable(rec); err == nil {
			stored, err = s.n.putKey(ctx, bucketDurable, key, data, rev)
		}
		cancel()
		if isWrongRevision(err) {
			continue
		}
		if err != nil {
			return nil, 0, err
		}
		return rec, stored, nil
	}
	return nil, 0, fmt.Errorf("changed by other nodes %d times in a row", durableTries)
}

// WatchDurable calls apply with every owner record the bucket holds,
// before it returns, then with each change any node makes, for the
// node's life: o is nil when clientID's record was removed; rev is the
// change's revision. A record that does not decode is logged and
// skipped.
func (s *Store) WatchDurable(ctx context.Context, apply func(clientID string, o *store.DurableOwner, rev uint64)) error {
	return s.n.startWatch(ctx, s.n.durable, bucketDurable, false, func(e jetstream.KeyValueEntry, initial bool) {
		raw, err := base64.RawURLEncoding.DecodeString(e.Key())
		if err != nil {
			s.n.log.Error("cluster: a durable owner's key does not decode; skipped", "bucket", bucketDurable, "key", e.Key(), "err", err)
			return
		}
		clientID := string(raw)
		if e.Operation() != jetstream.KeyValuePut {
			if !initial {
				apply(clientID, nil, e.Revision())
			}
			return
		}
		o, err := store.DecodeDurable(clientID, e.Value())
		if err != nil {
			s.n.log.Error("cluster: a durable owner's record does not decode; skipped", "bucket", bucketDurable, "client", clientID, "err", err)
			return
		}
		apply(clientID, o, e.Revision())
	})
}

// TakeHeld moves the messages other nodes hold for clientID, an owner of
// durable subscriptions that came back to this node, under the patterns
// pick accepts, to this node, and returns them for its scheduler,
// payloads dropped. Each moves as TakeOver moves a dead node's entries
// (moveEntry): a message its node delivered or dead-lettered meanwhile,
// or another node moved first, stays where it is. A message moved whose
// old entry could not be deleted is returned along with the error. It
// finds them by the watch's index, which may be a moment behind another
// node's write: a message held that late is delivered by its own node
// (the owner is live there by then). One the index has under a node
// whose entries were taken over meanwhile, this one's included (it came
// back just then), is looked for under the live nodes, so that the
// messages a dead node held are in the first batch with the others, in
// their order; one of this node's still under its key is its
// scheduler's already, and is not returned.
func (s *Store) TakeHeld(ctx context.Context, clientID string, pick func(pattern string) bool) ([]*store.Pending, error) {
	owner := clientKey(clientID)
	s.counts.mu.Lock()
	var keys []string
	for key := range s.counts.held[owner] {
		keys = append(keys, key)
	}
	s.counts.mu.Unlock()
	slices.Sort(keys)
	var moved []*store.Pending
	var errs []error
	for _, key := range keys {
		p, err := s.takeHeld(ctx, key, clientID, pick)
		if p != nil {
			moved = append(moved, p)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", key, s.n.explain(err)))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return moved, fmt.Errorf("cluster: take the messages held for %q: %w", clientID, err)
	}
	return moved, nil
}

// takeHeld moves one held message, at key, to this node; nil when it is
// gone, is this node's already, is not one pick takes, or was not moved
// (moveEntry).
func (s *Store) takeHeld(ctx context.Context, key, clientID string, pick func(pattern string) bool) (*store.Pending, error) {
	ctx, cancel, err := s.writeContextFrom(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	node, id, _ := strings.Cut(key, ".")
	data, rev, err := s.leaderGetSeq(ctx, bucketPending, kvSubjectPrefix+key)
	switch {
	case errors.Is(err, store.ErrNotFound):
		key, data, rev, err = s.findTaken(ctx, node, id)
	case err == nil && node == s.n.id:
		return nil, nil
	}
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	p, err := store.DecodeSchedule(id, data)
	if err != nil {
		return nil, err
	}
	if p.Kind != store.KindDurable || p.ClientID != clientID || !pick(p.Subscription) {
		return nil, nil
	}
	moved, err := s.moveEntry(ctx, key, p, data, rev)
	if !moved {
		return nil, err
	}
	return p, err
}

// findTaken looks for entry id, gone from node's keys, under the other
// live nodes': a takeover of node keeps the id. store.ErrNotFound when
// none has it.
func (s *Store) findTaken(ctx context.Context, node, id string) (key string, data []byte, rev uint64, err error) {
	for _, other := range s.n.Live() {
		if other == node || other == s.n.id {
			continue
		}
		key = other + "." + id
		data, rev, err = s.leaderGetSeq(ctx, bucketPending, kvSubjectPrefix+key)
		if !errors.Is(err, store.ErrNotFound) {
			return key, data, rev, err
		}
	}
	return "", nil, 0, store.ErrNotFound
}

// TakeBack moves p, a message this node held for an away owner, back to
// this node from the live node that took it over while this node was
// presumed dead, and reports whether it did: a node that comes back just
// then, with the owner, delivers it in its place among the others it
// holds, not after them. A message the other node made a retry meanwhile
// (its owner was live elsewhere) stays with it.
func (s *Store) TakeBack(ctx context.Context, p *store.Pending) (bool, error) {
	ctx, cancel, err := s.writeContextFrom(ctx)
	if err != nil {
		return false, err
	}
	defer cancel()
	key, data, rev, err := s.findTaken(ctx, s.n.id, p.ID)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err == nil {
		var taken *store.Pending
		if taken, err = store.DecodeSchedule(p.ID, data); err == nil {
			if taken.Kind != store.KindDurable {
				return false, nil
			}
			var moved bool
			moved, err = s.moveEntry(ctx, key, taken, data, rev)
			if err == nil {
				return moved, nil
			}
		}
	}
	return false, fmt.Errorf("cluster: take back held message %s: %w", p.ID, s.n.explain(err))
}

// HeldCount returns how many messages the cluster holds for clientID, an
// away owner of durable subscriptions, from the watch's index.
func (s *Store) HeldCount(clientID string) int {
	s.counts.mu.Lock()
	defer s.counts.mu.Unlock()
	return len(s.counts.held[clientKey(clientID)])
}

// writeContextFrom is writeContext bounded by ctx too.
func (s *Store) writeContextFrom(ctx context.Context) (context.Context, context.CancelFunc, error) {
	if err := s.n.quorum(); err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	stop := context.AfterFunc(s.n.ctx, cancel)
	return ctx, func() { stop(); cancel() }, nil
}
