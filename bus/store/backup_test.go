package store_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/protocol"
)

func TestBackupRestores(t *testing.T) {
	s := mustOpen(t, t.TempDir())
	a, b := retry(1, at(30)), hold(2, at(10))
	require.NoError(t, s.PutPending(a))
	require.NoError(t, s.PutPending(b))
	fill(t, s)
	dead, _, err := s.ListDeadLetters(store.Filter{}, "", 0)
	require.NoError(t, err)

	var copied bytes.Buffer
	require.NoError(t, s.Backup(func(snap store.Snapshot) error {
		// A write during the copy goes through and is not in it: the
		// copy is of the moment the backup started.
		require.NoError(t, s.PutPending(hold(3, at(40))))
		n, err := snap.WriteTo(&copied)
		assert.Equal(t, snap.Size(), n)
		return err
	}))

	restored := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(restored, store.FileName), copied.Bytes(), 0o600))
	r := mustOpen(t, restored)
	pending, err := r.Pending()
	require.NoError(t, err)
	assert.Equal(t, []*store.Pending{b, a}, pending)
	again, _, err := r.ListDeadLetters(store.Filter{}, "", 0)
	require.NoError(t, err)
	assert.Equal(t, dead, again)
	// The restored store goes on numbering after the copied ids.
	id, err := r.DeadLetter(a.ID, deadLetter(50, "t", protocol.ReasonMaxRetries, at(70)))
	require.NoError(t, err)
	assert.Equal(t, "d-000000000007", id)
}

func TestBackupErrors(t *testing.T) {
	err := store.OpenMemory().Backup(func(store.Snapshot) error { return nil })
	assert.ErrorIs(t, err, store.ErrNoFile)

	s := mustOpen(t, t.TempDir())
	boom := errors.New("boom")
	assert.ErrorIs(t, s.Backup(func(store.Snapshot) error { return boom }), boom)
	require.NoError(t, s.Close())
	assert.ErrorIs(t, s.Backup(func(store.Snapshot) error { return nil }), store.ErrClosed)
}

// TestBackupEitherMetaPage: a copy opens whichever meta page the last
// commit went to (bbolt alternates them), so one taken after any number
// of writes is a store Open accepts.
func TestBackupEitherMetaPage(t *testing.T) {
	s := mustOpen(t, t.TempDir())
	for i := range 4 {
		require.NoError(t, s.PutPending(hold(10+i, at(i))))
		var copied bytes.Buffer
		require.NoError(t, s.Backup(func(snap store.Snapshot) error {
			_, err := snap.WriteTo(&copied)
			return err
		}))
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, store.FileName), copied.Bytes(), 0o600))
		r, err := store.Open(dir, nil)
		require.NoError(t, err, "copy after %d writes", i+1)
		n, err := r.CountPending()
		require.NoError(t, err)
		assert.Equal(t, i+1, n)
		require.NoError(t, r.Close())
	}
}

// TestRestore: a backup goes in place as the store, keeping the one it
// replaces; a file that is not a store changes nothing; a store in use
// is not replaced.
func TestRestore(t *testing.T) {
	src := mustOpen(t, t.TempDir())
	require.NoError(t, src.PutPending(hold(1, at(1))))
	var copied bytes.Buffer
	require.NoError(t, src.Backup(func(snap store.Snapshot) error {
		_, err := snap.WriteTo(&copied)
		return err
	}))

	dir := t.TempDir()
	old, err := store.Open(dir, nil)
	require.NoError(t, err)
	require.NoError(t, old.PutPending(hold(2, at(2))))
	require.NoError(t, old.PutPending(hold(3, at(3))))
	// In use: refused.
	_, err = store.Restore(dir, "the copy", bytes.NewReader(copied.Bytes()))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "stop the bus first")
	require.NoError(t, old.Close())

	// Not a store: refused, and the store in place is untouched.
	_, err = store.Restore(dir, "the copy", bytes.NewReader([]byte("not a store at all, but long enough to look like one")))
	require.ErrorIs(t, err, store.ErrCorrupt)
	assert.Contains(t, err.Error(), "the copy is not a usable bub store, nothing changed")
	// Only the copy is named, and no advice to restore a backup, which
	// is what is under way.
	assert.NotContains(t, err.Error(), ".restore-")
	assert.NotContains(t, err.Error(), "from a backup")
	s := mustOpen(t, dir)
	assertCounts(t, s, 2, 0)
	require.NoError(t, s.Close())

	replaced, err := store.Restore(dir, "the copy", bytes.NewReader(copied.Bytes()))
	require.NoError(t, err)
	assert.FileExists(t, replaced)
	s = mustOpen(t, dir)
	assertCounts(t, s, 1, 0)
	require.NoError(t, s.Close())
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 2, "the store and the one it replaced, no temporary files: %v", entries)
}
