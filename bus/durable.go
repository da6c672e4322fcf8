package bus

import "github.com/bub-bus/bub/bus/store"

// Store keeps what the bus must not lose: pending retries and holds, and
// the dead-letter queue. Two implementations exist: *store.Store, a
// bbolt file (or memory) for one node, and *cluster.Store, JetStream
// replicated across the nodes of a cluster (docs/CLUSTER.md). Every
// write returns once it is durable: fsynced, or on a majority of the
// cluster's replicas. The methods mean what *store.Store's say.
type Store interface {
	PutPending(p *store.Pending) error
	DeletePending(id string) error
	// PendingSchedule returns every pending entry this node delivers,
	// without payload and meta (LoadMessage reads them when due).
	PendingSchedule() ([]*store.Pending, error)
	LoadMessage(p *store.Pending) error
	// PendingUsage returns what the pending entries take in all, and
	// those counting against identity (store.Pending.CountsAgainst).
	PendingUsage(identity string) (total, mine store.Usage, err error)
	CountPending() (int, error)

	DeadLetter(pendingID string, d *store.DeadLetter) (string, error)
	GetDeadLetter(id string) (*store.DeadLetter, error)
	ListDeadLetters(f store.Filter, cursor string, limit int) ([]*store.DeadLetter, string, error)
	RemoveDeadLetter(id string) error
	Requeue(id string, p *store.Pending) error
	PurgeDeadLetters(f store.Filter) (int, error)
	CountDeadLetters() (int, error)
	DeadLetterUsage() (store.Usage, error)

	IdempotencyStore

	// Backup hands fn a consistent copy of the store; a store with no
	// file of its own answers store.ErrNoFile.
	Backup(fn func(store.Snapshot) error) error
}

var _ Store = (*store.Store)(nil)
