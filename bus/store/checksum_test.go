package store_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/protocol"
)

// secret is in the records' payloads and from: an error about a damaged
// record must never show it, nor any other byte of the record.
const secret = "s3cr3t-payload"

// checksummed writes a retry and a dead letter that carry secret, closes
// the store, and returns the file's bytes and each record's stored value
// by id.
func checksummed(t *testing.T) (file []byte, records map[string][]byte) {
	t.Helper()
	dir := t.TempDir()
	s := mustOpen(t, dir)
	p := retry(1, at(1))
	p.Message.From, p.Message.Payload = secret+"-from", json.RawMessage(`{"type":"job","text":"`+secret+`"}`)
	require.NoError(t, s.PutPending(p))
	d := deadLetter(2, "agent:alice", protocol.ReasonRejected, at(2))
	d.Message.From, d.Message.Payload = p.Message.From, p.Message.Payload
	_, err := s.DeadLetter("", d)
	require.NoError(t, err)
	require.NoError(t, s.Close())

	path := filepath.Join(dir, store.FileName)
	records = map[string][]byte{}
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	require.NoError(t, err)
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		records["pending record p-000000000001"] = bytes.Clone(tx.Bucket([]byte("pending")).Get([]byte{7: 1}))
		records["deadletters record d-000000000001"] = bytes.Clone(tx.Bucket([]byte("deadletters")).Get([]byte{7: 1}))
		return nil
	}))
	require.NoError(t, db.Close())
	file, err = os.ReadFile(path)
	require.NoError(t, err)
	return file, records
}

// TestOpenRefusesDamagedRecords: one byte changed anywhere in a stored
// record (payload, from, id, version, the checksum itself), or in its
// key, and Open refuses the file, naming it and the record, never the
// record's bytes. bbolt checksums only its meta pages; before records
// carried checksums such a file opened, and the bus delivered the
// altered payload and from.
func TestOpenRefusesDamagedRecords(t *testing.T) {
	file, records := checksummed(t)
	for name, v := range records {
		// The record sits in the file once, or also in a freed page
		// that an earlier commit left; each copy is damaged alike.
		var at []int
		for i := 0; ; {
			j := bytes.Index(file[i:], v)
			if j < 0 {
				break
			}
			at = append(at, i+j)
			i += j + 1
		}
		require.NotEmpty(t, at, "%s is in the file as is", name)
		// Every byte of the value, changed by a pattern that varies,
		// and the last byte of the key, which precedes the value.
		for off := -1; off < len(v); off++ {
			dir := t.TempDir()
			path := filepath.Join(dir, store.FileName)
			damaged := bytes.Clone(file)
			for _, o := range at {
				damaged[o+off] ^= byte(off*37) | 1
			}
			require.NoError(t, os.WriteFile(path, damaged, 0o600))
			s, err := store.Open(dir, nil)
			if err == nil {
				_ = s.Close()
				t.Fatalf("%s: byte %d of %d changed, and Open accepted the file", name, off, len(v))
			}
			require.ErrorIs(t, err, store.ErrCorrupt, "%s, byte %d", name, off)
			msg := err.Error()
			assert.True(t, strings.HasPrefix(msg, "open store "+path+": not a bub store, or corrupt: "), msg)
			assert.Equal(t, 1, strings.Count(msg, "open store "), msg)
			assert.NotContains(t, msg, secret)
			if off >= 0 {
				// A changed key may instead break bbolt's order of keys,
				// which its own check names by page.
				assert.Contains(t, msg, name, "byte %d", off)
			}
		}
	}
}

// TestReadRefusesDamagedRecord: a record damaged after Open (a write to
// the file under the bus) fails the read that meets it with ErrDamaged,
// naming the record and the file, not its bytes; its neighbours read.
func TestReadRefusesDamagedRecord(t *testing.T) {
	dir := t.TempDir()
	s := mustOpen(t, dir)
	defer s.Close()
	ids := fill(t, s)
	d, err := s.GetDeadLetter(ids[1])
	require.NoError(t, err)
	d.Message.Payload = json.RawMessage(`{"text":"` + secret + `"}`)
	v, err := store.Encode(d)
	require.NoError(t, err)
	v[bytes.Index(v, []byte(secret))] ^= 1
	require.NoError(t, store.PutRaw(s, ids[1], v))

	_, err = s.GetDeadLetter(ids[1])
	require.ErrorIs(t, err, store.ErrDamaged)
	assert.EqualError(t, err, "get dead letter "+ids[1]+": decode deadletters record "+ids[1]+
		": damaged record: the record fails its CRC-32C checksum: it changed after it was written (in "+filepath.Join(dir, store.FileName)+")")
	_, _, err = s.ListDeadLetters(store.Filter{}, "", 0)
	assert.ErrorIs(t, err, store.ErrDamaged)
	_, err = s.GetDeadLetter(ids[0])
	assert.NoError(t, err)
}

// TestRestoreRefusesDamagedRecords: a backup whose record changed since
// it was copied is refused by Restore, which opens it with Open's checks,
// and the store in place stays.
func TestRestoreRefusesDamagedRecords(t *testing.T) {
	file, records := checksummed(t)
	v := records["pending record p-000000000001"]
	file = bytes.ReplaceAll(file, v, bytes.Replace(v, []byte(secret), []byte("S3cr3t-payload"), 1))

	dir := t.TempDir()
	s := mustOpen(t, dir)
	require.NoError(t, s.PutPending(hold(1, at(1))))
	require.NoError(t, s.Close())
	_, err := store.Restore(dir, "the copy", bytes.NewReader(file))
	require.ErrorIs(t, err, store.ErrCorrupt)
	assert.Contains(t, err.Error(), "nothing changed")
	assert.Contains(t, err.Error(), "pending record p-000000000001")
	assert.NotContains(t, err.Error(), secret)
	s = mustOpen(t, dir)
	assertCounts(t, s, 1, 0)
	require.NoError(t, s.Close())
}

// TestCheck: Check runs Open's checks on a file without writing to it:
// an intact file passes, a damaged record fails naming it, and a format
// 1 file passes and stays format 1.
func TestCheck(t *testing.T) {
	file, records := checksummed(t)
	dir := t.TempDir()
	path := filepath.Join(dir, store.FileName)
	require.NoError(t, os.WriteFile(path, file, 0o600))
	require.NoError(t, store.Check(path))

	v := records["deadletters record d-000000000001"]
	require.NoError(t, os.WriteFile(path, bytes.ReplaceAll(file, v, bytes.Replace(v, []byte(secret), []byte("S3cr3t-payload"), 1)), 0o600))
	err := store.Check(path)
	require.ErrorIs(t, err, store.ErrCorrupt)
	assert.ErrorContains(t, err, "check store "+path+": not a bub store, or corrupt: deadletters record d-000000000001: the record fails its CRC-32C checksum")

	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		t.Skip("the format 1 file's bbolt meta pages are little-endian")
	}
	old, err := os.ReadFile(filepath.Join("testdata", "format1", store.FileName))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, old, 0o600))
	require.NoError(t, store.Check(path))
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, old, after, "Check writes nothing")

	assert.ErrorIs(t, store.Check(filepath.Join(dir, "missing.db")), os.ErrNotExist)
}
