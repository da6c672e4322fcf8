package store

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// storeFormat is the layout version kept under meta/version. Open refuses
// a file with a newer one and upgrades an older one. Format 2 is format 1
// with a checksum in every record (record.go).
const storeFormat = 2

// Open opens the store in dir, creating dir (0o700) and dir/bub.db (0o600)
// if needed, and locks the file for this process.
//
// Open fails, with an error that names the file and the cause, when
// another process holds the lock (after waiting about a second), when the
// file is not a bub store or is damaged (ErrCorrupt; see integrity.go for
// what is checked), or when dir or the file cannot be created or written.
// A missing file is a fresh store; an empty one is damage. Open never
// falls back to memory, and never to an older state of the file.
func Open(dir string, opts *Options) (*Store, error) {
	if opts == nil {
		opts = &Options{}
	}
	path := filepath.Join(dir, FileName)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	s, err := openFile(path, opts)
	if err != nil {
		return nil, openError(path, err)
	}
	return s, nil
}

// openFile opens and checks the store file at path. Its errors say what
// is wrong with the file, not which file it is: Open names the store,
// Restore the user's copy.
func openFile(path string, opts *Options) (*Store, error) {
	exists, err := checkHeader(path)
	if err != nil {
		return nil, err
	}
	db, err := openBolt(path, &bolt.Options{Timeout: lockTimeout, NoSync: opts.NoSync})
	if err != nil {
		return nil, explainOpen(err)
	}
	if exists {
		if err := checkTree(db); err != nil {
			return nil, errors.Join(err, db.Close())
		}
		if err := db.View(checkRecords); err != nil {
			return nil, errors.Join(err, db.Close())
		}
	}
	if err := db.Update(initBuckets); err != nil {
		return nil, errors.Join(err, db.Close())
	}
	s := newStore(&boltDB{db: db}, opts.OnCommit)
	s.file = path
	return s, nil
}

// Check runs Open's checks on the store file at path, the meta pages,
// every page and every record's checksum, without writing to it or
// upgrading it: for a copy (bub backup checks the one it wrote). It
// fails with an error wrapping ErrCorrupt for a damaged file.
func Check(path string) error {
	exists, err := checkHeader(path)
	if err == nil && !exists {
		err = fs.ErrNotExist
	}
	if err != nil {
		return fmt.Errorf("check store %s: %w", path, err)
	}
	db, err := openBolt(path, &bolt.Options{Timeout: lockTimeout, ReadOnly: true})
	if err != nil {
		return fmt.Errorf("check store %s: %w", path, explainOpen(err))
	}
	err = checkTree(db)
	if err == nil {
		err = db.View(checkRecords)
	}
	if err != nil {
		return errors.Join(fmt.Errorf("check store %s: %w", path, err), db.Close())
	}
	return db.Close()
}

// restoreHint tells an operator what to do with a store the bus refused.
const restoreHint = "stop here and restore " + FileName + " from a backup copied while the bus was stopped, " +
	"or move the damaged file aside (keep it for analysis) to start with an empty store"

// openError names the file, and for a damaged file says how to recover.
func openError(path string, err error) error {
	if errors.Is(err, ErrCorrupt) {
		return fmt.Errorf("open store %s: %w; %s", path, err, restoreHint)
	}
	return fmt.Errorf("open store %s: %w", path, err)
}

// errLocked is Open's error for a file another process holds.
var errLocked = errors.New("locked by another process (is another bub serve running?)")

// explainOpen says in words what bbolt's open errors mean for an operator.
func explainOpen(err error) error {
	switch {
	case errors.Is(err, bolterrors.ErrTimeout):
		return errLocked
	case errors.Is(err, bolterrors.ErrInvalid), errors.Is(err, bolterrors.ErrChecksum),
		errors.Is(err, bolterrors.ErrVersionMismatch),
		// bbolt has no sentinel for a file shorter than its two meta pages.
		strings.HasPrefix(err.Error(), "file size too small"):
		return fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return err
}

// initBuckets creates the buckets of a new file and checks the format of
// an existing one.
func initBuckets(tx *bolt.Tx) error {
	for _, name := range []bucket{bucketMeta, bucketPending, bucketDeadLetters, bucketIdempotency, bucketDurable, bucketToolSubscriptions, bucketWebhooks} {
		if _, err := tx.CreateBucketIfNotExists([]byte(name)); err != nil {
			return fmt.Errorf("create bucket %s: %w", name, err)
		}
	}
	meta := tx.Bucket([]byte(bucketMeta))
	v := meta.Get([]byte("version"))
	if v == nil {
		return meta.Put([]byte("version"), []byte(strconv.Itoa(storeFormat)))
	}
	n, err := strconv.Atoi(string(v))
	switch {
	case err != nil:
		return fmt.Errorf("%w: meta/version is %q", ErrCorrupt, v)
	case n > storeFormat:
		return fmt.Errorf("store format %d is newer than this program reads (%d)", n, storeFormat)
	case n < storeFormat:
		if err := upgradeRecords(boltTx{tx}); err != nil {
			return corrupt("upgrading the store from format %d to %d: %v", n, storeFormat, err)
		}
		return meta.Put([]byte("version"), []byte(strconv.Itoa(storeFormat)))
	}
	return nil
}

// recordBuckets are the buckets of records, with their ids' prefixes.
var recordBuckets = []struct {
	name   bucket
	prefix string
}{{bucketPending, pendingPrefix}, {bucketDeadLetters, deadLetterPrefix}}

// upgradeRecords rewrites every record of an older format in the current
// one, checksum included, in Open's transaction. Each is decoded in full
// first, so a damaged one fails the upgrade, and Open, naming it.
func upgradeRecords(t boltTx) error {
	for _, b := range recordBuckets {
		var keys [][]byte
		if err := t.each(b.name, nil, func(k, _ []byte) (bool, error) {
			keys = append(keys, bytes.Clone(k))
			return true, nil
		}); err != nil {
			return err
		}
		for _, k := range keys {
			var v []byte
			var err error
			switch old := t.get(b.name, k); b.name {
			case bucketPending:
				var p *Pending
				if p, err = decodePending(k, old); err == nil {
					v, err = encodePending(p)
				}
			default:
				var d *DeadLetter
				if d, err = decodeDeadLetter(k, old); err == nil {
					v, err = EncodeDeadLetter(d)
				}
			}
			if err == nil {
				err = t.put(b.name, k, v)
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// checkRecords checks every record's checksum, and that the record names
// the id it is stored under, before the bus reads any: a byte changed
// inside a record would otherwise be delivered as it now reads (a payload,
// a "from"), and one changed in a key would make a record pass for
// another. Only the sums and the ids are checked, not the JSON, so this
// costs about a read of the file. A record without a sum must be of
// version 1, written before sums; upgradeRecords then decodes it in full.
func checkRecords(tx *bolt.Tx) error {
	for _, b := range recordBuckets {
		bk := tx.Bucket([]byte(b.name))
		if bk == nil {
			continue
		}
		err := bk.ForEach(func(k, v []byte) error {
			id := keyID(b.prefix, k)
			sealed, err := unseal(v)
			switch {
			case err != nil:
				return corrupt("%s record %s: %v", b.name, id, err)
			case !sealed && !bytes.HasPrefix(v, []byte(`{"v":1,`)):
				return corrupt("%s record %s has no checksum, or a damaged one", b.name, id)
			case !namesID(v, id):
				return corrupt("%s record %s does not hold the id of its key: the key or the id is damaged", b.name, id)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// namesID reports whether the record v begins {"v":N,"id":"id", as every
// record the store writes does.
func namesID(v []byte, id string) bool {
	rest, ok := bytes.CutPrefix(v, []byte(`{"v":`))
	if !ok {
		return false
	}
	rest = bytes.TrimLeft(rest, "0123456789")
	return bytes.HasPrefix(rest, []byte(`,"id":"`+id+`"`))
}

// boltDB is the file store. bbolt commits every Update with an fsync of
// the file (fdatasync on Linux) unless NoSync is set.
type boltDB struct {
	db *bolt.DB
}

func (b *boltDB) update(fn func(tx) error) error {
	return closedErr(b.db.Update(func(t *bolt.Tx) error { return fn(boltTx{t}) }))
}

func (b *boltDB) view(fn func(tx) error) error {
	return closedErr(b.db.View(func(t *bolt.Tx) error { return fn(boltTx{t}) }))
}

func (b *boltDB) close() error {
	return b.db.Close()
}

func closedErr(err error) error {
	if errors.Is(err, bolterrors.ErrDatabaseNotOpen) {
		return ErrClosed
	}
	return err
}

type boltTx struct {
	tx *bolt.Tx
}

// bucket returns the named bucket, which Open created.
func (t boltTx) bucket(b bucket) *bolt.Bucket {
	return t.tx.Bucket([]byte(b))
}

func (t boltTx) get(b bucket, k []byte) []byte { return t.bucket(b).Get(k) }

// put fills pages to the brim before it splits them: records are keyed by
// sequence numbers, so new ones go at the end and a page,
// once split, takes no more of them. bbolt's default (half full) would
// leave every page half empty, which for small records doubles the pages
// each commit writes and the file holds (20,000 retries with a 400-byte
// record: 2,033 leaf pages instead of 3,999).
func (t boltTx) put(b bucket, k, v []byte) error {
	bk := t.bucket(b)
	bk.FillPercent = 1.0
	return bk.Put(k, v)
}

func (t boltTx) delete(b bucket, k []byte) error       { return t.bucket(b).Delete(k) }
func (t boltTx) nextSequence(b bucket) (uint64, error) { return t.bucket(b).NextSequence() }
func (t boltTx) sequence(b bucket) uint64              { return t.bucket(b).Sequence() }
func (t boltTx) count(b bucket) int                    { return t.bucket(b).Stats().KeyN }

func (t boltTx) each(b bucket, from []byte, fn func(k, v []byte) (bool, error)) error {
	c := t.bucket(b).Cursor()
	for k, v := c.Seek(from); k != nil; k, v = c.Next() {
		if more, err := fn(k, v); err != nil || !more {
			return err
		}
	}
	return nil
}

var _ tx = boltTx{}
