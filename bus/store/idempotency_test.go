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
