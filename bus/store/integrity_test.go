package store_test

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/protocol"
)

// These tests damage a store of 100 dead letters in ways that, unchecked,
// crash the bus or silently empty it, and check that Open refuses each
// with one line that names the file, what is wrong and how to recover.

const pageSize = 4096 // what bbolt used for these files; checked in damagedStore

// damagedStore writes a store of 100 dead letters and 3 pending entries to
// a new directory, closes it, and returns the directory and the file's
// contents.
func damagedStore(t *testing.T) (string, []byte) {
	t.Helper()
	dir := t.TempDir()
	s, err := store.Open(dir, nil)
	require.NoError(t, err)
	for i := range 100 {
		_, err := s.DeadLetter("", deadLetter(i, fmt.Sprintf("agent:a%d", i), protocol.ReasonMaxRetries, at(i)))
		require.NoError(t, err)
	}
	for i := range 3 {
		require.NoError(t, s.PutPending(retry(i, at(i))))
	}
	require.NoError(t, s.Close())
	data, err := os.ReadFile(filepath.Join(dir, store.FileName))
	require.NoError(t, err)
	require.Greater(t, len(data), 8*pageSize, "the store spans enough pages to damage")
	require.Zero(t, len(data)%pageSize)
	return dir, data
}

// requireRefused opens dir and checks that Open fails with ErrCorrupt in
// one line naming the file, containing want and the way to recover.
func requireRefused(t *testing.T, dir, want string) {
	t.Helper()
	_, err := store.Open(dir, nil)
	require.Error(t, err)
	msg := err.Error()
	path := filepath.Join(dir, store.FileName)
	assert.ErrorIs(t, err, store.ErrCorrupt)
	assert.True(t, strings.HasPrefix(msg, "open store "+path+": not a bub store, or corrupt: "), msg)
	assert.Contains(t, msg, want)
	assert.Contains(t, msg, "restore bub.db from a backup")
	assert.NotContains(t, msg, "\n")
	t.Log(msg)
}

func writeStore(t *testing.T, dir string, data []byte) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(dir, store.FileName), data, 0o600))
}

func TestOpenDamaged(t *testing.T) {
	garbage := func(seed uint64, n int) []byte {
		r := rand.New(rand.NewPCG(seed, 0))
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return b
	}
	tests := []struct {
		name   string
		damage func(data []byte) []byte
		want   string
	}{
		{"empty file", func([]byte) []byte { return nil }, "the file is empty (0 bytes)"},
		{"cut in half", func(d []byte) []byte { return d[:len(d)/2] }, "it was cut short"},
		{"cut to 16 KB", func(d []byte) []byte { return d[:16*1024] }, "it was cut short"},
		{"cut inside a meta page", func(d []byte) []byte { return d[:100] }, "meta page 1: missing"},
		{"last page in use gone", func(d []byte) []byte {
			// bbolt grows the file ahead of use; cut into what is used.
			return d[:(highWaterMark(d)-1)*pageSize]
		}, "it was cut short"},
		{"random bytes in every data page", func(d []byte) []byte {
			copy(d[2*pageSize:], garbage(1, len(d)-2*pageSize))
			return d
		}, "freelist page"},
		{"random bytes in every page but the meta and freelist pages", func(d []byte) []byte {
			free := freelistPage(d)
			for off := 2 * pageSize; off < len(d); off += pageSize {
				if off != free*pageSize {
					copy(d[off:off+pageSize], garbage(uint64(off), pageSize))
				}
			}
			return d
		}, "reading its pages failed"},
		{"random page headers", func(d []byte) []byte {
			for off := 2 * pageSize; off < len(d); off += pageSize {
				copy(d[off:], garbage(uint64(off), 16))
			}
			return d
		}, "freelist page"},
		{"corrupt first page", func(d []byte) []byte {
			copy(d, garbage(2, pageSize))
			return d
		}, "meta page 0: no bbolt magic number (not a bbolt file, or overwritten); meta page 1 is intact but holds an older state"},
		{"one bit flipped in the first meta page", func(d []byte) []byte {
			d[16+48] ^= 1 // the transaction id
			return d
		}, "meta page 0: checksum mismatch"},
		{"corrupt second meta page", func(d []byte) []byte {
			copy(d[pageSize:], garbage(3, pageSize))
			return d
		}, "meta page 1: no bbolt magic number"},
		{"second meta page zeroed", func(d []byte) []byte {
			copy(d[pageSize:], make([]byte, pageSize))
			return d
		}, "meta page 1: no bbolt magic number"},
		{"meta pages swapped", func(d []byte) []byte {
			m0 := append([]byte(nil), d[:pageSize]...)
			copy(d, d[pageSize:2*pageSize])
			copy(d[pageSize:], m0)
			return d
		}, "page header says page"},
		{"first meta page from an older copy", func(d []byte) []byte {
			// Both pages valid, but not written by consecutive commits:
			// a meta page restored from another copy of the file.
			older := append([]byte(nil), d...)
			older[16+48] += 4 // txid, keeping its parity, 3 or 5 from the other
			fixChecksum(older[16:])
			copy(d, older[:pageSize])
			return d
		}, "not consecutive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, data := damagedStore(t)
			writeStore(t, dir, tt.damage(data))
			requireRefused(t, dir, tt.want)
		})
	}
}

// TestOpenRandomDamageNeverCrashes overwrites one random stretch of one
// random page per round. Damage in free space or inside a value may go
// unnoticed by Open, which cannot check what JSON means; what must hold
// is that Open refuses the file or every read afterwards returns, with
// data or an error, and never panics or faults.
func TestOpenRandomDamageNeverCrashes(t *testing.T) {
	rounds := 200
	if testing.Short() {
		rounds = 30
	}
	dir, clean := damagedStore(t)
	refused := 0
	for round := range rounds {
		r := rand.New(rand.NewPCG(uint64(round), 42))
		data := append([]byte(nil), clean...)
		page := 2 + r.IntN(len(data)/pageSize-2)
		off, n := r.IntN(pageSize), 1+r.IntN(pageSize)
		for i := page*pageSize + off; i < min(len(data), page*pageSize+off+n); i++ {
			data[i] = byte(r.Uint32())
		}
		writeStore(t, dir, data)
		s, err := store.Open(dir, nil)
		if err != nil {
			require.ErrorIs(t, err, store.ErrCorrupt, "round %d", round)
			refused++
			continue
		}
		// Reads of damaged records report errors; they must not panic.
		_, _ = s.Pending()
		_, _ = s.CountDeadLetters()
		cursor := ""
		for range 200 {
			_, next, err := s.ListDeadLetters(store.Filter{}, cursor, 10)
			if err != nil || next == "" {
				break
			}
			cursor = next
		}
		require.NoError(t, s.Close())
	}
	t.Logf("%d of %d damaged files refused at open", refused, rounds)
}

func TestOpenMissingFileIsFresh(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new")
	s := mustOpen(t, dir)
	assertCounts(t, s, 0, 0)
}

func TestOpenIntactAfterManyCommits(t *testing.T) {
	// Many commits move the newest meta page back and forth and grow the
	// file; each reopen must pass the checks.
	dir, _ := damagedStore(t)
	s := mustOpen(t, dir)
	for i := range 5 {
		ids, _, err := s.ListDeadLetters(store.Filter{}, "", 10)
		require.NoError(t, err)
		require.NoError(t, s.RemoveDeadLetter(ids[0].ID))
		s = reopen(t, s, dir)
		assertCounts(t, s, 3, 99-i)
	}
}

// fixChecksum recomputes the checksum of a meta (the bytes after the page
// header) after a test edited it, so that only the edit is wrong.
func fixChecksum(m []byte) {
	h := fnv.New64a()
	_, _ = h.Write(m[:56])
	binary.NativeEndian.PutUint64(m[56:], h.Sum64())
}

// highWaterMark returns the larger of the two meta pages' page counts.
func highWaterMark(d []byte) int {
	m0 := binary.NativeEndian.Uint64(d[16+40:])
	m1 := binary.NativeEndian.Uint64(d[pageSize+16+40:])
	return int(max(m0, m1))
}

// freelistPage returns the newest meta page's freelist page id.
func freelistPage(d []byte) int {
	tx0 := binary.NativeEndian.Uint64(d[16+48:])
	tx1 := binary.NativeEndian.Uint64(d[pageSize+16+48:])
	m := d[16:]
	if tx1 > tx0 {
		m = d[pageSize+16:]
	}
	return int(binary.NativeEndian.Uint64(m[32:]))
}
