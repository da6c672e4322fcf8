package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/protocol"
)

// FuzzDecodeRecord stores arbitrary bytes as a dead letter and as a
// pending entry, as a corrupt file would hold them, and reads them through
// every method that decodes. Reading must return an error that names the
// record, or a record that encodes back to a stable form; never panic.
func FuzzDecodeRecord(f *testing.F) {
	p := retry(1, at(1))
	p.ID = "p-000000000001"
	d := deadLetter(1, "agent:alice", protocol.ReasonMaxRetries, at(9))
	d.ID = "d-000000000001"
	for _, r := range []any{p, d} {
		v, err := store.Encode(r)
		require.NoError(f, err)
		f.Add(v)
	}
	for _, s := range []string{
		"", "null", "{}", `{"v":1}`, `{"v":2,"id":"d-000000000001"}`, "[1,2]", "\x00\xff",
		`{"v":1,"id":"p-000000000001","kind":"hold","message":{"payload":{"a":[1,{"b":null}]}},"nextAt":"0000-01-01T00:00:00+23:59"}`,
		`{"v":1,"id":"d-000000000001","reason":"rejected","attempts":[{"at":"2026-01-01T00:00:00Z","error":"\u00e9"}]}`,
	} {
		f.Add([]byte(s))
	}

	f.Fuzz(func(t *testing.T, value []byte) {
		s := store.OpenMemory()
		defer s.Close()
		require.NoError(t, store.PutRaw(s, "d-1", value))
		require.NoError(t, store.PutRaw(s, "p-1", value))

		d, err := s.GetDeadLetter("d-1")
		if err != nil {
			require.ErrorContains(t, err, "get dead letter d-1: decode deadletters record d-000000000001: ")
		} else {
			roundTrip(t, s, "d-1", d, func() (any, error) { return s.GetDeadLetter("d-1") })
		}
		_, _, err = s.ListDeadLetters(store.Filter{Topic: "agent:*", Reason: protocol.ReasonRejected}, "", 0)
		if err != nil {
			require.ErrorContains(t, err, "list dead letters: decode deadletters record d-000000000001: ")
		}

		pending, err := s.Pending()
		schedule, scheduleErr := s.PendingSchedule()
		if err != nil {
			require.ErrorContains(t, err, "list pending: decode pending record p-000000000001: ")
			require.Error(t, scheduleErr, "the schedule decodes what Pending refuses")
			require.ErrorContains(t, scheduleErr, "list pending schedule: decode pending record p-000000000001: ")
		} else {
			require.NoError(t, scheduleErr, "the schedule refuses what Pending decodes")
			require.Len(t, schedule, 1)
			require.NoError(t, s.LoadMessage(schedule[0]))
			require.Equal(t, pending[0], schedule[0], "the schedule, once loaded, is the entry")
			require.Len(t, pending, 1)
			roundTrip(t, s, "p-1", pending[0], func() (any, error) {
				all, err := s.Pending()
				if err != nil {
					return nil, err
				}
				return all[0], nil
			})
		}
	})
}

// roundTrip checks that a record read back from its own encoding encodes
// the same way again.
func roundTrip(t *testing.T, s *store.Store, id string, record any, read func() (any, error)) {
	t.Helper()
	v, err := store.Encode(record)
	require.NoError(t, err, "a record that decodes must encode")
	require.NoError(t, store.PutRaw(s, id, v))
	again, err := read()
	require.NoError(t, err, "reading back %s", v)
	v2, err := store.Encode(again)
	require.NoError(t, err)
	require.Equal(t, string(v), string(v2))
}

// FuzzEncodePending holds the hand-written encoding of a pending record to
// encoding/json's, byte for byte, so that the file format does not depend
// on which one wrote it: both refuse the same records, and write the same
// bytes for the rest.
func FuzzEncodePending(f *testing.F) {
	f.Add("p-000000000001", "agent:alice", "bob", "timeout after 30s", []byte(`{"type":"t","data":"x"}`), []byte(`{"trace":"t"}`), int64(1_700_000_000_123_456_789), true)
	f.Add("", "é\u2028<&>\"\\\x00\x7f", "\xff", "", []byte(" [ 1 , \"a b\" ]\n"), []byte(nil), int64(0), false)
	f.Add("p-1", "t", "", "\t\n", []byte(`{"a":`), []byte(`x`), int64(-62_135_596_800_000_000_000/1000), true)
	f.Add("p-1", "t", "c", "e", []byte(`1`), []byte(`{} `), int64(1<<62), true)
	f.Fuzz(func(t *testing.T, id, topic, client, text string, payload, meta []byte, nanos int64, retry bool) {
		when := time.Unix(0, nanos).In(time.FixedZone("", int(nanos%50_000)))
		p := &store.Pending{
			ID: id, Kind: store.KindHold, AskedBy: client, NextAt: when,
			Message: store.Message{ID: text, Topic: topic, From: client, Publisher: text, Payload: payload, Meta: meta, PublishedAt: when.Add(time.Duration(nanos))},
		}
		if retry {
			p.Kind, p.ClientID, p.Subscription, p.Subscriber, p.AskedBy = store.KindRetry, client, topic, text, ""
			p.Attempts = []store.Attempt{{At: when}, {At: when.AddDate(int(nanos%9000), 0, 0), Error: text}}
		}
		want, wantErr := store.EncodeWithJSON(p)
		got, err := store.Encode(p)
		if wantErr != nil {
			require.Error(t, err, "encoding/json refused %#v: %v", p, wantErr)
			return
		}
		require.NoError(t, err)
		require.Equal(t, string(want), string(got))
	})
}

// TestFormatID pins the ids' form: zero-padded to 12 digits, longer when
// the number is.
func TestFormatID(t *testing.T) {
	for seq, want := range map[uint64]string{
		1:               "p-000000000001",
		42:              "p-000000000042",
		999_999_999_999: "p-999999999999",
		1e12:            "p-1000000000000",
		^uint64(0):      "p-18446744073709551615",
	} {
		require.Equal(t, want, store.FormatID("p-", seq))
	}
}
