package bus_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/cluster/clustertest"
	"github.com/bub-bus/bub/protocol"
)

// kib is a payload of about 1 KiB.
var kib = map[string]any{"type": "t", "blob": strings.Repeat("x", 1000)}

// publishKiB publishes a 1 KiB message to topic.
func publishKiB(c *bustest.Client, topic string) bustest.Response {
	return c.Call(protocol.MethodSendMessage, map[string]any{"topic": topic, "payload": kib})
}

// TestLimitStoredBytes: the bytes of held messages count against the
// publisher's identity and the bus, as their number does; at a cap,
// publishes are refused with -32011 naming it.
func TestLimitStoredBytes(t *testing.T) {
	srv := bustest.Start(t, nil)
	require.Nil(t, publishKiB(bustest.Connect(t, srv.URL, "p0", nil), "agent:away").Error)
	first, _, err := srv.Store.PendingUsage("")
	require.NoError(t, err)
	size := first.Bytes // one held 1 KiB message as stored
	srv.SetLimits(bus.Limits{MaxStoredBytesPerIdentity: int(size * 5 / 2), MaxStoredBytes: int(size * 11 / 2)})

	p1 := bustest.Connect(t, srv.URL, "p1", nil)
	p2 := bustest.Connect(t, srv.URL, "p2", nil)
	held := func(c *bustest.Client) int {
		n := 0
		for ; n < 10; n++ {
			if r := publishKiB(c, "agent:away"); r.Error != nil {
				return n
			}
		}
		return n
	}
	require.Equal(t, 3, held(p1), "holds until past 2.5 records' bytes")
	requireCode(t, publishKiB(p1, "agent:away"), protocol.CodeLimitReached, `max_stored_bytes_per_identity: identity "p1" holds`)
	require.Equal(t, 2, held(p2), "the bus's 5.5 records' bytes fill up")
	requireCode(t, publishKiB(p2, "agent:away"), protocol.CodeLimitReached, "max_stored_bytes: the bus holds")
	total, _, err := srv.Store.PendingUsage("")
	require.NoError(t, err)
	// Records differ by a byte or two: their ids and times.
	require.InDelta(t, 6*size, total.Bytes, 6*8)
	require.Equal(t, 2.0, refusals(t, srv, "max_stored_bytes_per_identity"))
	require.Equal(t, 2.0, refusals(t, srv, "max_stored_bytes"))
}

// TestLimitDeadLetters: the dead-letter queue is capped by count and by
// bytes. Held messages expiring into a full queue stay pending and count
// against their publisher, who is refused at its cap: one identity
// cannot fill the disk by letting its holds expire (it wrote 120 MiB in
// 25 s that way). Room in the queue lets them in again.
func TestLimitDeadLetters(t *testing.T) {
	for name, tc := range map[string]struct {
		limits bus.Limits
		want   int // the dead letters the cap lets in
	}{
		"count": {bus.Limits{MaxDeadLetters: 3}, 3},
		"bytes": {bus.Limits{MaxDeadLetterBytes: 1}, 1},
	} {
		t.Run(name, func(t *testing.T) {
			const perIdentity = 4
			tc.limits.MaxPendingPerIdentity = perIdentity
			srv := bustest.Start(t, &bus.Options{HoldLifetime: 10 * time.Millisecond, RetryDelayCap: 20 * time.Millisecond, Limits: tc.limits})
			p := bustest.Connect(t, srv.URL, "p", nil)
			// Publish until the queue is full and the identity's held
			// messages, which cannot go there, fill its cap.
			accepted, refusal := 0, ""
			require.Eventually(t, func() bool {
				r := publishKiB(p, "agent:away")
				if r.Error == nil {
					accepted++
					return false
				}
				refusal = r.Error.Message
				if r.Error.Code != protocol.CodeLimitReached {
					t.Errorf("publish refused with %d %s, want %d", r.Error.Code, refusal, protocol.CodeLimitReached)
					return true
				}
				return metric(t, srv, "bub_dead_letters_full", "") == 1
			}, bustest.Timeout, time.Millisecond)
			require.Contains(t, refusal, "max_pending_per_identity")
			require.Positive(t, refusals(t, srv, "max_dead_letters")+refusals(t, srv, "max_dead_letter_bytes"))
			// Every accepted message is in the queue or pending; holds
			// expiring together pass the queue's cap by those in flight
			// at most.
			require.Eventually(t, func() bool {
				dead, err1 := srv.Store.CountDeadLetters()
				pending, err2 := srv.Store.CountPending()
				return err1 == nil && err2 == nil && dead+pending == accepted
			}, bustest.Timeout, time.Millisecond)
			dead, err := srv.Store.CountDeadLetters()
			require.NoError(t, err)
			require.GreaterOrEqual(t, dead, tc.want)
			require.LessOrEqual(t, dead, tc.want+perIdentity-1)

			// Purged, the queue takes the waiting messages in.
			_, err = srv.Store.PurgeDeadLetters(store.Filter{})
			require.NoError(t, err)
			require.Eventually(t, func() bool {
				n, err := srv.Store.CountDeadLetters()
				return err == nil && n >= min(accepted-dead, tc.want)
			}, bustest.Timeout, time.Millisecond)
		})
	}
}

// TestLimitRetriesCountAgainstSubscriber: the retries a failing
// subscriber needs count against its identity, not the publisher's. The
// publisher keeps publishing; the subscriber's retries stop at its cap,
// beyond which the messages are dead-lettered for it at once, and the
// subscriber, the one holding them up, is refused its own publishes.
func TestLimitRetriesCountAgainstSubscriber(t *testing.T) {
	srv := bustest.Start(t, &bus.Options{RetryBaseDelay: time.Hour, RetryDelayCap: time.Hour,
		Limits: bus.Limits{MaxPendingPerIdentity: 2}})
	failing := bustest.Connect(t, srv.URL, "failing", func(protocol.ProcessMessageParams) any {
		return &protocol.Error{Code: protocol.CodeInternalError, Message: "down"}
	})
	failing.Subscribe("work", "")
	pub := bustest.Connect(t, srv.URL, "pub", nil)
	for i := range 5 {
		r := pub.Publish("work", "t")
		require.Len(t, r.Acks, 1)
		if i < 2 {
			require.True(t, r.Acks[0].Retrying, "%+v", r.Acks[0])
		} else {
			require.False(t, r.Acks[0].Retrying, "%+v", r.Acks[0])
			require.Contains(t, r.Acks[0].Error, `not retried: max_pending_per_identity: identity "failing" holds 2`)
		}
	}
	_, mine, err := srv.Store.PendingUsage("failing")
	require.NoError(t, err)
	require.Equal(t, 2, mine.Entries)
	_, mine, err = srv.Store.PendingUsage("pub")
	require.NoError(t, err)
	require.Zero(t, mine.Entries, "the publisher holds nothing up")
	dead, _, err := srv.Store.ListDeadLetters(store.Filter{}, "", 0)
	require.NoError(t, err)
	require.Len(t, dead, 3)
	require.Equal(t, protocol.ReasonMaxRetries, dead[0].Reason)
	require.Contains(t, dead[0].Attempts[0].Error, "not retried: max_pending_per_identity")

	requireServes(t, srv, "healthy")
	requireCode(t, failing.Call(protocol.MethodSendMessage, map[string]any{"topic": "elsewhere", "payload": map[string]any{"type": "t"}}),
		protocol.CodeLimitReached, `max_pending_per_identity: identity "failing" holds 2`)
}

// TestClusterLimitDeadLetters: on a cluster's store (JetStream), the
// dead-letter queue's cap holds as on one node, and an identity's pending
// work counts cluster-wide: at its cap on one node, it is refused on the
// other too.
func TestClusterLimitDeadLetters(t *testing.T) {
	const perIdentity, deadCap = 4, 2
	opts := clusterOptions()
	opts.HoldLifetime, opts.RetryDelayCap = 10*time.Millisecond, 50*time.Millisecond
	opts.Limits = bus.Limits{MaxPendingPerIdentity: perIdentity, MaxDeadLetters: deadCap}
	nodes := clustertest.Start(t, opts, "a", "b")
	a, b := nodes[0], nodes[1]
	p := bustest.Connect(t, a.URL, "p", nil)
	require.Eventually(t, func() bool {
		r := publishKiB(p, "agent:away")
		return r.Error != nil && metric(t, a, "bub_dead_letters_full", "") == 1
	}, clustertest.Timeout, time.Millisecond)
	dead := metric(t, b, "bub_dead_letters", "")
	require.GreaterOrEqual(t, dead, float64(deadCap), "b reads the one queue")
	require.LessOrEqual(t, dead, float64(deadCap+perIdentity-1))

	// The same identity on the other node holds as much already.
	again := bustest.Connect(t, b.URL, "p", nil)
	require.Eventually(t, func() bool {
		r := publishKiB(again, "agent:away")
		return r.Error != nil && strings.Contains(r.Error.Message, `max_pending_per_identity: identity "p" holds`)
	}, clustertest.Timeout, time.Millisecond)
}

// TestDeadLetterFullAckSaysSo: a delivery the bus gives up on at once
// (one attempt allowed, or its subscriber at its cap) that meets a full
// dead-letter queue stays pending, and its ack says so, as a rejection's
// does, rather than read as given up for good.
func TestDeadLetterFullAckSaysSo(t *testing.T) {
	srv := bustest.Start(t, &bus.Options{MaxAttempts: 1, RetryDelayCap: time.Hour, Limits: bus.Limits{MaxDeadLetters: 1}})
	failing := bustest.Connect(t, srv.URL, "failing", func(protocol.ProcessMessageParams) any {
		return &protocol.Error{Code: protocol.CodeInternalError, Message: "down"}
	})
	failing.Subscribe("work", "")
	pub := bustest.Connect(t, srv.URL, "pub", nil)
	r := pub.Publish("work", "t")
	require.Len(t, r.Acks, 1)
	require.NotContains(t, r.Acks[0].Error, "not dead-lettered yet", "the queue had room")
	r = pub.Publish("work", "t")
	require.Len(t, r.Acks, 1)
	require.False(t, r.Acks[0].Retrying)
	require.Contains(t, r.Acks[0].Error, "not dead-lettered yet; the bus tries again later")
	pending, err := srv.Store.CountPending()
	require.NoError(t, err)
	require.Equal(t, 1, pending, "the second message stays pending")
}
