package store

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Snapshot is a consistent copy of the store as of one moment: what
// Backup hands its callback. It is valid only during the callback.
type Snapshot interface {
	// Size is the number of bytes WriteTo writes.
	Size() int64
	// WriteTo writes the copy, a complete store file that Open accepts.
	WriteTo(w io.Writer) (int64, error)
}

// Backup calls fn with a consistent snapshot of the store's file, taken
// in a read transaction (bbolt's Tx.WriteTo), so writes go on while it
// is copied and the copy holds every commit up to its start and none
// after. A long copy holds the transaction open: the file cannot be
// remapped to grow meanwhile, so a write that needs more room waits for
// it. The in-memory store has no file and returns ErrNoFile.
func (s *Store) Backup(fn func(Snapshot) error) error {
	b, ok := s.db.(*boltDB)
	if !ok {
		return fmt.Errorf("backup: %w", ErrNoFile)
	}
	return closedErr(b.db.View(func(t *bolt.Tx) error { return fn(snapshot{t}) }))
}

// snapshot is a read transaction's copy of the file.
type snapshot struct{ tx *bolt.Tx }

func (s snapshot) Size() int64 { return s.tx.Size() }

// WriteTo writes the copy with its meta pages where bbolt itself would
// have put them. Tx.WriteTo always writes the transaction's meta to page
// 0 and the same meta, one transaction older, to page 1; bbolt writes a
// transaction's meta to page txid%2, and checkHeader holds a file to that
// rule (a meta page in the wrong place is a sign of damage). For an odd
// txid the two pages are swapped back.
func (s snapshot) WriteTo(w io.Writer) (int64, error) {
	mw := &metaOrder{w: w, pageSize: s.tx.DB().Info().PageSize}
	n, err := s.tx.WriteTo(mw)
	if err == nil && len(mw.head) > 0 {
		err = fmt.Errorf("backup: the copy ended within its meta pages (%d bytes)", len(mw.head))
	}
	return n, err
}

// metaOrder holds back the first two pages (the meta pages) of a copy
// until both are in, puts them in order, and passes the rest through.
type metaOrder struct {
	w        io.Writer
	pageSize int
	head     []byte
	done     bool
}

func (m *metaOrder) Write(p []byte) (int, error) {
	if m.done {
		return m.w.Write(p)
	}
	take := min(2*m.pageSize-len(m.head), len(p))
	m.head = append(m.head, p[:take]...)
	if len(m.head) < 2*m.pageSize {
		return len(p), nil
	}
	ps := m.pageSize
	e := binary.NativeEndian
	if txid := e.Uint64(m.head[pageHeaderSize+48:]); txid%2 != 0 {
		page0 := append([]byte(nil), m.head[:ps]...)
		copy(m.head[:ps], m.head[ps:])
		copy(m.head[ps:], page0)
		// The page id is in the header, outside the meta's checksum.
		e.PutUint64(m.head[0:], 0)
		e.PutUint64(m.head[ps:], 1)
	}
	m.done = true
	if _, err := m.w.Write(m.head); err != nil {
		return 0, err
	}
	m.head = nil
	if rest := p[take:]; len(rest) > 0 {
		n, err := m.w.Write(rest)
		return take + n, err
	}
	return len(p), nil
}

// Restore puts a copy made by Backup in place as dir's store, for a bus
// that is stopped: it writes r to a temporary file in dir, opens that
// with every check Open makes (so a damaged or foreign file is refused
// before anything changes), and renames it to dir/bub.db. A store already
// there is kept beside it, renamed to bub.db.replaced-TIME, and that name
// is returned. source names r in errors (the user's file, or "standard
// input"). Restore refuses while a bus holds the store's lock; it cannot
// stop a bus from starting meanwhile.
func Restore(dir, source string, r io.Reader) (replaced string, err error) {
	path := filepath.Join(dir, FileName)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("restore %s: %w", path, err)
	}
	if f, err := os.Open(path); err == nil {
		busy := lockedByOther(f)
		f.Close()
		if busy {
			return "", fmt.Errorf("restore %s: %w: stop the bus first", path, errLocked)
		}
	}
	tmp, err := os.MkdirTemp(dir, ".restore-")
	if err != nil {
		return "", fmt.Errorf("restore %s: %w", path, err)
	}
	defer os.RemoveAll(tmp)
	copyPath := filepath.Join(tmp, FileName)
	if err := writeFileSync(copyPath, r); err != nil {
		return "", fmt.Errorf("restore %s: write the copy: %w", path, err)
	}
	s, err := openFile(copyPath, &Options{})
	if err != nil {
		// The user's file is the one to name, not the temporary copy,
		// and restoring a backup is what is under way.
		return "", fmt.Errorf("restore %s into %s: %s is not a usable bub store, nothing changed: %w", source, path, source, err)
	}
	if err := s.Close(); err != nil {
		return "", fmt.Errorf("restore %s: %w", path, err)
	}
	if _, err := os.Stat(path); err == nil {
		replaced = path + ".replaced-" + time.Now().UTC().Format("20060102T150405Z")
		if err := os.Rename(path, replaced); err != nil {
			return "", fmt.Errorf("restore %s: keep the current store: %w", path, err)
		}
	}
	if err := os.Rename(copyPath, path); err != nil {
		return replaced, fmt.Errorf("restore %s: %w", path, err)
	}
	// The renames survive a crash only once the directory is synced.
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return replaced, nil
}

// writeFileSync writes r to a new file at path (0600) and syncs it.
func writeFileSync(path string, r io.Reader) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
