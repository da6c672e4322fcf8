// Package jswrite holds what the bus's writers to JetStream share: the
// options that make a write wait out a leader election, and how
// JetStream's refusal of a compare-and-set reads. The cluster's buckets
// (package cluster) and the A2A task store (package a2a) write so.
package jswrite

import (
	"errors"
	"time"

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
