package store

import "errors"

// Errors returned by Store methods, wrapped with the operation and the id
// or argument at fault; match them with errors.Is.
var (
	// ErrNotFound is returned by GetDeadLetter, RemoveDeadLetter and
	// Requeue when no dead letter has the id.
	ErrNotFound = errors.New("not found")

	// ErrInvalid is returned when an argument breaks a rule: a malformed
	// id or cursor, an unknown Kind or Reason, a Filter.Topic that is not a
	// valid pattern. It is the caller's fault, never the store's.
	ErrInvalid = errors.New("invalid argument")

	// ErrCorrupt is returned by Open when the file is not a bub store or
	// is damaged: cut short, emptied, overwritten in places, with a meta
	// page that does not check out, or with a record that fails its
	// checksum (naming the record). The bus refuses such a file
	// rather than start on part of its data.
	ErrCorrupt = errors.New("not a bub store, or corrupt")

	// ErrDamaged is returned by a read of a record that fails its
	// checksum or does not decode: the file changed under the store (a
	// bad disk, a stray write) or was written by something else. The
	// error names the bucket and the record's id, and the file, never
	// the record's bytes. Open checks every record's checksum and
	// refuses such a file (ErrCorrupt); this is for damage done later.
	ErrDamaged = errors.New("damaged record")

	// ErrClosed is returned by every method called after Close.
	ErrClosed = errors.New("store closed")

	// ErrNoFile is returned by Backup on a store from OpenMemory, which
	// keeps nothing on disk to copy.
	ErrNoFile = errors.New("the store is in memory and has no file to copy")
)
