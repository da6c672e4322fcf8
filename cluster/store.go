package cluster

import (
	"context"
	"errors"

	"github.com/bub-bus/bub/bus/store"
)

// Store is the bus's durable state in JetStream: pending retries and
// holds in the bucket BUB_PENDING, keyed by the node that delivers them,
// and the dead-letter queue in the stream BUB_DLQ, shared by every node.
// It implements bus.Store; every write returns once a majority of the
// replicas has it.
type Store struct {
	n *Node
}

// Store returns the node's durable store.
func (n *Node) Store() *Store { return &Store{n: n} }

var errNotBuilt = errors.New("cluster: store: not built yet")

// PutPending stores p under this node, assigning p.ID when empty.
func (s *Store) PutPending(p *store.Pending) error { return errNotBuilt }

// DeletePending removes a pending entry.
func (s *Store) DeletePending(id string) error { return errNotBuilt }

// PendingSchedule returns this node's pending entries without payloads.
func (s *Store) PendingSchedule() ([]*store.Pending, error) { return nil, nil }

// LoadMessage reads p's payload and meta back.
func (s *Store) LoadMessage(p *store.Pending) error { return errNotBuilt }

// PendingCounts counts pending entries cluster-wide, in all and by publisher.
func (s *Store) PendingCounts(publisher string) (total, mine int, err error) {
	return 0, 0, nil
}

// CountPending counts pending entries cluster-wide.
func (s *Store) CountPending() (int, error) { return 0, nil }

// DeadLetter adds d to the dead-letter queue and removes pendingID.
func (s *Store) DeadLetter(pendingID string, d *store.DeadLetter) (string, error) {
	return "", errNotBuilt
}

// GetDeadLetter returns one dead letter.
func (s *Store) GetDeadLetter(id string) (*store.DeadLetter, error) { return nil, errNotBuilt }

// ListDeadLetters lists dead letters matching f, oldest first.
func (s *Store) ListDeadLetters(f store.Filter, cursor string, limit int) ([]*store.DeadLetter, string, error) {
	return nil, "", errNotBuilt
}

// RemoveDeadLetter removes one dead letter.
func (s *Store) RemoveDeadLetter(id string) error { return errNotBuilt }

// Requeue moves a dead letter back to pending as p, under this node.
func (s *Store) Requeue(id string, p *store.Pending) error { return errNotBuilt }

// PurgeDeadLetters removes the dead letters matching f.
func (s *Store) PurgeDeadLetters(f store.Filter) (int, error) { return 0, errNotBuilt }

// CountDeadLetters counts the dead-letter queue.
func (s *Store) CountDeadLetters() (int, error) { return 0, errNotBuilt }

// Backup answers store.ErrNoFile: a cluster's state is JetStream's, and
// is backed up with NATS's own tools (docs/CLUSTER.md).
func (s *Store) Backup(fn func(store.Snapshot) error) error { return store.ErrNoFile }

// TakeOver moves the pending entries of node, presumed dead, to this
// node and returns them for scheduling, with their payloads dropped.
// Each is moved with a compare-and-set on its revision, so two nodes
// taking over at once move each entry once.
func (s *Store) TakeOver(ctx context.Context, node string) ([]*store.Pending, error) {
	return nil, errNotBuilt
}
