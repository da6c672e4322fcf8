package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/fnv"
	"io"
	"io/fs"
	"os"
	"runtime/debug"
	"strings"

	bolt "go.etcd.io/bbolt"
)

// Open checks a file in three steps before the bus trusts it, because
// bbolt alone does not protect the process from a damaged file:
//
//  1. checkHeader reads the two meta pages with ordinary reads, before
//     bbolt maps the file into memory. bbolt maps more than the file
//     holds, so a file cut short is read past its end through the map,
//     which is a SIGBUS that Go cannot recover; and bbolt silently uses
//     the older meta page when the newer one is bad, which rolls the
//     queue back without a word.
//  2. bolt.Open, with faults turned into panics on this goroutine.
//  3. checkTree reads every page reachable from the root, on this
//     goroutine and with the same protection, then runs bbolt's own
//     consistency check (tx.Check). bbolt asserts with panics when a page
//     is not what it expects, so a file that passes the header check but
//     has damaged pages would otherwise crash the first request that
//     reads them.

// The on-disk layout of a bbolt meta page, as bbolt v1.x writes it: a page
// header (id uint64, flags uint16, count uint16, overflow uint32) followed
// by the meta fields, in the byte order of the machine that wrote it.
const (
	pageHeaderSize = 16
	metaSize       = 64 // through the checksum
	metaSummed     = 56 // the checksum covers the fields before it

	boltMagic        = 0xED0CDAED
	boltVersion      = 2
	metaPageFlag     = 0x04
	freelistPageFlag = 0x10
	noFreelist       = ^uint64(0)
	minPageSize      = 1024
	maxPageSize      = 1 << 20
	defaultPageLen   = 4096 // where to look for the second meta page when the first is unreadable
)

// meta is one decoded meta page.
type meta struct {
	pageID   uint64
	flags    uint16
	magic    uint32
	version  uint32
	pageSize uint32
	root     uint64
	freelist uint64
	pgid     uint64 // high-water mark: pages [0, pgid) are in use
	txid     uint64
	checksum uint64
	sum      uint64 // the checksum computed over the page
}

func decodeMeta(page []byte) meta {
	e := binary.NativeEndian
	b := page[pageHeaderSize:]
	h := fnv.New64a()
	_, _ = h.Write(b[:metaSummed])
	return meta{
		pageID:   e.Uint64(page[0:]),
		flags:    e.Uint16(page[8:]),
		magic:    e.Uint32(b[0:]),
		version:  e.Uint32(b[4:]),
		pageSize: e.Uint32(b[8:]),
		root:     e.Uint64(b[16:]),
		freelist: e.Uint64(b[32:]),
		pgid:     e.Uint64(b[40:]),
		txid:     e.Uint64(b[48:]),
		checksum: e.Uint64(b[56:]),
		sum:      h.Sum64(),
	}
}

// validate says what is wrong with meta page n on its own, or nil.
func (m meta) validate(n int) error {
	switch {
	case m.magic != boltMagic:
		return fmt.Errorf("meta page %d: no bbolt magic number (not a bbolt file, or overwritten)", n)
	case m.version != boltVersion:
		return fmt.Errorf("meta page %d: bbolt format version %d, want %d", n, m.version, boltVersion)
	case m.checksum != m.sum:
		return fmt.Errorf("meta page %d: checksum mismatch (damaged or partly written)", n)
	case m.pageID != uint64(n) || m.flags != metaPageFlag:
		return fmt.Errorf("meta page %d: page header says page %d with flags %#x", n, m.pageID, m.flags)
	case m.pageSize < minPageSize || m.pageSize > maxPageSize || m.pageSize&(m.pageSize-1) != 0:
		return fmt.Errorf("meta page %d: page size %d is not a power of two in [%d, %d]", n, m.pageSize, minPageSize, maxPageSize)
	case m.txid%2 != uint64(n):
		return fmt.Errorf("meta page %d: transaction %d belongs on meta page %d", n, m.txid, m.txid%2)
	case m.pgid < 4:
		return fmt.Errorf("meta page %d: high-water mark %d is below the 4 pages of an empty file", n, m.pgid)
	case m.root < 2 || m.root >= m.pgid:
		return fmt.Errorf("meta page %d: root page %d is outside [2, %d)", n, m.root, m.pgid)
	case m.freelist != noFreelist && (m.freelist < 2 || m.freelist >= m.pgid):
		return fmt.Errorf("meta page %d: freelist page %d is outside [2, %d)", n, m.freelist, m.pgid)
	}
	return nil
}

// checkHeader checks the file at path against its own meta pages, with
// ordinary reads. It reports exists false, and no error, when there is no
// file: a fresh store. An empty file is damage, not a fresh store: bbolt
// writes four pages when it creates a file, so a file of 0 bytes was
// truncated or replaced after the fact, and starting on it would silently
// drop every pending message and dead letter.
func checkHeader(path string) (exists bool, err error) {
	info, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, err
	case info.IsDir():
		return true, fmt.Errorf("is a directory, not a store file")
	case !info.Mode().IsRegular():
		return true, fmt.Errorf("is not a regular file (%s)", info.Mode().Type())
	case info.Size() == 0:
		return true, corrupt("the file is empty (0 bytes); a store the bus created always holds at least 4 pages, so it was truncated or replaced")
	}
	size := info.Size()

	f, err := os.Open(path)
	if err != nil {
		return true, err
	}
	defer f.Close()
	defer func() {
		if errors.Is(err, ErrCorrupt) && lockedByOther(f) {
			err = errLocked
		}
	}()
	readPage := func(off int64) ([]byte, error) {
		buf := make([]byte, pageHeaderSize+metaSize)
		if _, err := f.ReadAt(buf, off); err != nil {
			if errors.Is(err, io.EOF) {
				return nil, nil
			}
			return nil, err
		}
		return buf, nil
	}

	p0, err := readPage(0)
	if err != nil {
		return true, err
	}
	if p0 == nil {
		return true, corrupt("the file is %d bytes, too short to hold a meta page", size)
	}
	m0 := decodeMeta(p0)
	err0 := m0.validate(0)
	// The second meta page sits one page in; when the first is unreadable
	// its page size is unknown, and the bus never sets one, so bbolt used
	// the default.
	pageSize := int64(defaultPageLen)
	if err0 == nil {
		pageSize = int64(m0.pageSize)
	}
	p1, err := readPage(pageSize)
	if err != nil {
		return true, err
	}
	var err1 error
	var m1 meta
	if p1 == nil {
		err1 = fmt.Errorf("meta page 1: missing, the file is only %d bytes", size)
	} else {
		m1 = decodeMeta(p1)
		err1 = m1.validate(1)
	}
	switch {
	case err0 != nil && err1 != nil:
		return true, corrupt("both meta pages are invalid: %v; %v", err0, err1)
	case err0 != nil:
		// bbolt would quietly open the older state of meta page 1.
		return true, corrupt("%v; meta page 1 is intact but holds an older state, which bbolt would open without a word", err0)
	case err1 != nil:
		return true, corrupt("%v; meta page 0 is intact, but one damaged meta page means the disk or a copy damaged the file", err1)
	}

	if m0.pageSize != m1.pageSize {
		return true, corrupt("the meta pages disagree on the page size (%d and %d)", m0.pageSize, m1.pageSize)
	}
	newer, older := m0, m1
	if m1.txid > m0.txid {
		newer, older = m1, m0
	}
	// bbolt writes each commit's meta over the older one, so the two
	// always hold consecutive transactions.
	if newer.txid-older.txid != 1 {
		return true, corrupt("the meta pages hold transactions %d and %d, which are not consecutive", older.txid, newer.txid)
	}
	for _, m := range []meta{newer, older} {
		if m.pgid > uint64(size/pageSize) {
			return true, corrupt("the file is %d bytes but its meta page %d says it holds %d pages of %d bytes (%d bytes): it was cut short",
				size, m.pageID, m.pgid, pageSize, m.pgid*uint64(pageSize))
		}
	}
	return true, checkFreelist(f, newer, pageSize)
}

// checkFreelist checks the header of the newest state's freelist page.
// bbolt reads that page inside Open and panics when it is not a freelist,
// and a panic there leaves the file mapped and so locked until the
// process exits; an ordinary read first turns it into an error.
func checkFreelist(f *os.File, m meta, pageSize int64) error {
	if m.freelist == noFreelist {
		return nil
	}
	buf := make([]byte, pageHeaderSize+8)
	if _, err := f.ReadAt(buf, int64(m.freelist)*pageSize); err != nil {
		return corrupt("reading freelist page %d: %v", m.freelist, err)
	}
	e := binary.NativeEndian
	id, flags := e.Uint64(buf[0:]), e.Uint16(buf[8:])
	count, overflow := uint64(e.Uint16(buf[10:])), uint64(e.Uint32(buf[12:]))
	ids := uint64(pageHeaderSize)
	if count == 0xFFFF {
		// The real count is the page's first element.
		count = e.Uint64(buf[pageHeaderSize:])
		ids += 8
	}
	switch {
	case id != m.freelist || flags != freelistPageFlag:
		return corrupt("freelist page %d: page header says page %d with flags %#x", m.freelist, id, flags)
	case overflow >= m.pgid-m.freelist:
		return corrupt("freelist page %d: runs %d pages past the high-water mark %d", m.freelist, overflow, m.pgid)
	case count > m.pgid || ids+count*8 > (overflow+1)*uint64(pageSize):
		return corrupt("freelist page %d: %d free pages do not fit the page or the file", m.freelist, count)
	}
	return nil
}

// openBolt runs bolt.Open with memory faults turned into panics, and turns
// a panic into an error. If bbolt panics halfway, the file it opened is
// closed here so its lock is released.
func openBolt(path string, opts *bolt.Options) (db *bolt.DB, err error) {
	var file *os.File
	opts.OpenFile = func(name string, flag int, perm os.FileMode) (*os.File, error) {
		f, err := os.OpenFile(name, flag, perm)
		file = f
		return f, err
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			if file != nil {
				_ = file.Close()
			}
			db, err = nil, corrupt("bbolt failed while opening the file: %v", r)
		}
	}()
	return bolt.Open(path, 0o600, opts)
}

// maxCheckErrors bounds how many of bbolt's check findings are reported.
const maxCheckErrors = 3

// checkTree reads every page of the newest state, then runs bbolt's
// consistency check. It must run before any write.
func checkTree(db *bolt.DB) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = corrupt("reading its pages failed: %v", r)
		}
	}()
	return db.View(func(tx *bolt.Tx) error {
		// tx.Check runs on a goroutine of bbolt's own, where a fault
		// cannot be caught; reading every page here first turns a page
		// that points outside the file into an error instead.
		if err := tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			_ = readBucket(b)
			return nil
		}); err != nil {
			return corrupt("reading its buckets failed: %v", err)
		}
		var found []string
		n := 0
		for err := range tx.Check() {
			if n++; len(found) < maxCheckErrors {
				found = append(found, err.Error())
			}
		}
		if n > 0 {
			return corrupt("bbolt's consistency check found %d problems, first: %s", n, strings.Join(found, "; "))
		}
		return nil
	})
}

// readBucket reads every key and value of b and its nested buckets, so
// that every page they sit on is touched; the checksum only keeps the
// reads from being optimized away.
func readBucket(b *bolt.Bucket) uint32 {
	var sum uint32
	_ = b.ForEach(func(k, v []byte) error {
		sum = crc32.Update(sum, crc32.IEEETable, k)
		if v == nil {
			if child := b.Bucket(k); child != nil {
				sum ^= readBucket(child)
			}
			return nil
		}
		sum = crc32.Update(sum, crc32.IEEETable, v)
		return nil
	})
	return sum
}

// corrupt builds an ErrCorrupt error with what was found.
func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
}
