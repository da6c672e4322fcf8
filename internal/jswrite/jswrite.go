// Package jswrite holds what the bus's writers to JetStream share: the
// options that make a write wait out a leader election, the loop that
// makes a read wait one out, and how JetStream's refusal of a
// compare-and-set reads. The cluster's buckets (package cluster) and the
// A2A task store (package a2a) write and read so.
package jswrite

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// RideElections makes a write wait out a stream with no leader for up
// to 10 s instead of failing: while a node dies or comes back, JetStream
// elects new leaders, and a write in between finds no one to answer
// ("no response from stream"). Only a write nobody received is sent
// again, so none is stored twice.
var RideElections = []jetstream.PublishOpt{jetstream.WithRetryAttempts(40), jetstream.WithRetryWait(250 * time.Millisecond)}

// WrongLast reports whether err is JetStream's refusal of a write made
// over a message that is no longer its subject's last (an expected last
// sequence per subject, a KV revision): replicated streams answer
// 10164, single ones 10071.
func WrongLast(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// ReadTry bounds one try of a read (TryUntil): a request to a stream
// whose leader just died goes unanswered, and is not sent again by
// anyone, until the survivors elect another leader.
const ReadTry = 5 * time.Second

// TryUntil runs f, ReadTry at a time, again while JetStream leaves it
// unanswered or has no leader to answer (Unanswered), until total has
// passed (0: no bound but ctx's) or ctx ends. Around a node's death the
// survivors still send to the dead leader until they elect another
// (docs/CLUSTER.md, "A node dies"); a read sent then would otherwise wait
// out its whole context. Only for what may be done twice: reads, and the
// making of a stream or consumer that already exists.
func TryUntil(ctx context.Context, total time.Duration, f func(ctx context.Context) error) error {
	var deadline time.Time
	if total > 0 {
		deadline = time.Now().Add(total)
	}
	for {
		tctx, cancel := context.WithTimeout(ctx, ReadTry)
		err := f(tctx)
		cancel()
		if err == nil || !Unanswered(err) || !deadline.IsZero() && time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(100 * time.Millisecond) // not to spin while nobody answers at once
	}
}

// Unanswered reports whether err says nobody answered a request, or
// that the stream has no leader to answer it yet.
func Unanswered(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) ||
		errors.As(err, &apiErr) && apiErr.Code == 503
}
