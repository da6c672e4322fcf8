package store_test

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	bolt "go.etcd.io/bbolt"

	"github.com/bub-bus/bub/bus/store"
)

// TestOpensFormat1: testdata/format1/bub.db was written by the store as
// it was before group commit and the payload-less schedule (commit
// c85e3a3, a little-endian machine): two pending entries, a third deleted,
// and a dead letter, none with a checksum. The file opens, reads back
// whole, schedules without payloads, and takes new writes with ids after
// the ones it used; Open upgraded it to format 2, every record with its
// checksum.
func TestOpensFormat1(t *testing.T) {
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		t.Skip("the file's bbolt meta pages are little-endian")
	}
	old, err := os.ReadFile(filepath.Join("testdata", "format1", store.FileName))
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, store.FileName), old, 0o600))
	s, err := store.Open(dir, nil)
	require.NoError(t, err)
	defer s.Close()

	const payload = `{"z":1,"type":"t","html":"<b>&</b>","é":[1.50]}`
	all, err := s.Pending()
	require.NoError(t, err)
	require.Len(t, all, 2)
	assert.Equal(t, []string{"p-000000000001", "p-000000000002"}, []string{all[0].ID, all[1].ID})
	assert.Equal(t, store.KindRetry, all[0].Kind)
	assert.Equal(t, "worker", all[0].ClientID)
	assert.Equal(t, "spawner", all[1].AskedBy)
	assert.Equal(t, payload, string(all[0].Message.Payload))

	schedule, err := s.PendingSchedule()
	require.NoError(t, err)
	require.Len(t, schedule, 2)
	for i, p := range schedule {
		assert.Nil(t, p.Message.Payload)
		require.NoError(t, s.LoadMessage(p))
		assert.Equal(t, all[i], p)
	}
	total, mine, err := s.PendingUsage("pub-identity")
	require.NoError(t, err)
	assert.Equal(t, [2]int{2, 2}, [2]int{total.Entries, mine.Entries})

	d, err := s.GetDeadLetter("d-1")
	require.NoError(t, err)
	assert.Equal(t, "m-4", d.Message.ID)
	assert.Equal(t, payload, string(d.Message.Payload))

	p := hold(9, at(9))
	require.NoError(t, s.PutPending(p))
	assert.Equal(t, "p-000000000004", p.ID, "p-3 was used and deleted")
	require.NoError(t, s.Requeue("d-1", retry(10, at(10))))
	assertCounts(t, s, 4, 0)
	require.NoError(t, s.Close())

	db, err := bolt.Open(filepath.Join(dir, store.FileName), 0o600, &bolt.Options{ReadOnly: true})
	require.NoError(t, err)
	defer db.Close()
	require.NoError(t, db.View(func(tx *bolt.Tx) error {
		assert.Equal(t, "2", string(tx.Bucket([]byte("meta")).Get([]byte("version"))))
		n := 0
		for _, b := range []string{"pending", "deadletters"} {
			require.NoError(t, tx.Bucket([]byte(b)).ForEach(func(k, v []byte) error {
				n++
				assert.True(t, store.Sealed(v), "%s %x: %s", b, k, v)
				return nil
			}))
		}
		assert.Equal(t, 4, n)
		return nil
	}))
}
