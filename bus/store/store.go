package store

import (
	"errors"
	"fmt"
	"time"
)

// FileName is the name of the store's file inside the directory given to
// Open.
const FileName = "bub.db"

// lockTimeout bounds how long Open waits for another process to release
// the file lock before failing.
const lockTimeout = time.Second

// Options configure Open. A nil *Options means the defaults.
type Options struct {
	// OnCommit, if set, is called after every successful commit with the
	// time it took, fsync included: a commit-latency metric. Writes made
	// at the same time share a commit (commit.go), so there may be fewer
	// commits than writes. It runs on the store's committer goroutine and
	// must not call the Store.
	OnCommit func(time.Duration)

	// NoSync skips the fsync at commit. UNSAFE: a crash of the machine
	// (not only of the process) can then lose committed writes or corrupt
	// the file. For benchmarks and throwaway data only. Default false.
	NoSync bool
}

// Store holds pending deliveries and the dead-letter queue. Open returns
// one backed by a file, OpenMemory one for tests. A Store is safe for
// concurrent use; writes are serialized, and concurrent ones share a
// commit (commit.go).
type Store struct {
	db backend
	// file is the path of the store's file, "" in memory: errors about
	// a damaged record name it.
	file     string
	onCommit func(time.Duration)
	pending  pendingIndex
	commits  committer
}

// backend is what the file store and the memory store each implement:
// transactions over ordered buckets of byte keys and values. Everything
// else, encoding, ids, filters, pagination, sits above it in Store, so
// both implementations behave alike by construction and the conformance
// tests check the rest.
type backend interface {
	// update runs fn in a read-write transaction and commits it if fn
	// returns nil; otherwise nothing fn did is kept.
	update(fn func(tx) error) error
	// view runs fn in a read-only transaction.
	view(fn func(tx) error) error
	close() error
}

// tx is one transaction. Values returned by get and passed to each are
// valid only until the transaction ends.
type tx interface {
	get(b bucket, k []byte) []byte // nil if absent
	put(b bucket, k, v []byte) error
	delete(b bucket, k []byte) error
	// nextSequence returns the bucket's next sequence number, starting at
	// 1. Numbers handed out by a committed transaction are never handed
	// out again.
	nextSequence(b bucket) (uint64, error)
	// sequence returns the last number nextSequence handed out.
	sequence(b bucket) uint64
	// each calls fn on the keys at or after from, in order, until fn
	// returns false or an error. fn must not modify the bucket.
	each(b bucket, from []byte, fn func(k, v []byte) (bool, error)) error
	count(b bucket) int
}

// OpenMemory returns a Store that keeps everything in memory and loses it
// on Close or exit. It is for tests: a bus that must not lose messages
// uses Open. Records are encoded as in the file, so callers never share
// memory with the store.
func OpenMemory() *Store {
	return newStore(newMemory(), nil)
}

func (s *Store) view(fn func(tx) error) error {
	return s.where(s.db.view(fn))
}

// where adds the store's file to an error about a damaged record, so that
// an operator knows which file to look at.
func (s *Store) where(err error) error {
	if s.file == "" || !errors.Is(err, ErrDamaged) {
		return err
	}
	return fmt.Errorf("%w (in %s)", err, s.file)
}
