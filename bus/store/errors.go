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
	// is damaged: cut short, emptied, overwritten in places, or with a
	// meta page that does not check out. The bus refuses such a file
	// rather than start on part of its data.
	ErrCorrupt = errors.New("not a bub store, or corrupt")

	// ErrClosed is returned by every method called after Close.
	ErrClosed = errors.New("store closed")

	// ErrNoFile is returned by Backup on a store from OpenMemory, which
	// keeps nothing on disk to copy.
	ErrNoFile = errors.New("the store is in memory and has no file to copy")
)
