package store

import (
	"bytes"
	"errors"
	"testing"
	"time"
)

// TestIdempotentDamagedRecord checks that a record changed on disk is an
// error, not an answer for another request, and that expired records are
// dropped by later writes.
func TestIdempotentDamagedRecord(t *testing.T) {
	s := OpenMemory()
	defer s.Close()
	now := time.Now()
	rec := &Idempotent{BodyHash: []byte{1}, Answer: []byte(`{"messageId":"m-1"}`), Expires: now.Add(time.Minute)}
	if err := s.PutIdempotent("id", "k", rec, now); err != nil {
		t.Fatal(err)
	}
	k := idempotencyKey("id", "k")
	err := s.update(func(t tx) error {
		v := bytes.Replace(t.get(bucketIdempotency, k), []byte("m-1"), []byte("m-2"), 1)
		return t.put(bucketIdempotency, k, v)
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetIdempotent("id", "k", now); !errors.Is(err, ErrInvalid) {
		t.Fatalf("damaged record: %+v, %v; want ErrInvalid", got, err)
	}
	// Once expired, the next write near it drops it.
	later := now.Add(2 * time.Minute)
	if err := s.PutIdempotent("id", "j", rec, later); err != nil {
		t.Fatal(err)
	}
	var n int
	_ = s.view(func(t tx) error { n = t.count(bucketIdempotency); return nil })
	if n != 1 {
		t.Fatalf("%d records after the expired one's neighbour was written; want 1", n)
	}
}

// TestIdempotentUsage checks that idempotency records count against
// their identity, in entries and bytes (PendingUsage's bytes too), that
// replacing a record counts it once, that pruning drops only the
// identity's expired ones and says when the next expires, and that a
// store opened again counts the same.
func TestIdempotentUsage(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	put := func(identity, key string, ttl time.Duration) {
		t.Helper()
		rec := &Idempotent{BodyHash: []byte{1}, Answer: []byte(`{"messageId":"m-1"}`), Expires: now.Add(ttl)}
		if err := s.PutIdempotent(identity, key, rec, now); err != nil {
			t.Fatal(err)
		}
	}
	put("alice", "a", time.Minute)
	put("alice", "b", time.Second)
	put("alice", "b", time.Second) // replaced: still one record
	put("alice\x00x", "c", time.Minute)
	put("bob", "a", time.Minute)
	want := func(st *Store, identity string, entries int) Usage {
		t.Helper()
		u, err := st.IdempotentUsage(identity)
		if err != nil {
			t.Fatal(err)
		}
		if u.Entries != entries || (entries > 0) != (u.Bytes > 0) {
			t.Fatalf("%q's idempotency usage is %+v, want %d entries", identity, u, entries)
		}
		_, mine, err := st.PendingUsage(identity)
		if err != nil {
			t.Fatal(err)
		}
		if mine.Bytes != u.Bytes || mine.Entries != 0 {
			t.Fatalf("%q's pending usage is %+v: want the records' %d bytes and no entries", identity, mine, u.Bytes)
		}
		return u
	}
	want(s, "alice", 2)
	want(s, "bob", 1)
	next, err := s.PruneIdempotent("alice", now.Add(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if !next.Equal(now.Add(time.Minute)) {
		t.Errorf("after pruning, the next expiry is %v, want %v", next, now.Add(time.Minute))
	}
	u := want(s, "alice", 1)
	want(s, "alice\x00x", 1)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if again := want(s, "alice", 1); again != u {
		t.Errorf("opened again, alice's usage is %+v, want %+v", again, u)
	}
}
