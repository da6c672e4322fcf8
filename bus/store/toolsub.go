package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// bucketToolSubscriptions maps the key of a tool subscription's callback
// (ToolSubscription.Key) to the subscription.
const bucketToolSubscriptions bucket = "toolsubscriptions"

// ToolSubscription is an active tool subscription (docs/PROTOCOL.md,
// "Tool subscriptions"): a thread's tool call whose events the bus
// delivers on Topic.
type ToolSubscription struct {
	// Key is the SHA-256, in hex, of the subscription's callback id. The
	// id itself, a secret like a token, is never stored: a copy of the
	// file cannot post events.
	Key        string `json:"key"`
	GroupID    string `json:"groupId"`
	ToolCallID string `json:"toolCallId"`
	// Topic is where the events are delivered.
	Topic string `json:"topic"`
	// Tool is the topic of the tool, which a cancel notifies; optional.
	Tool string `json:"tool,omitempty"`
	// Owner is the clientId that started it; events come from it.
	Owner string `json:"owner"`
	// Identity is whom its events count against (the owner's pending
	// caps and grants).
	Identity string    `json:"identity,omitempty"`
	Created  time.Time `json:"created"`
}

// toolSubscriptionRecord is the stored form: the version first, the
// checksum last (seal).
type toolSubscriptionRecord struct {
	V int `json:"v"`
	*ToolSubscription
}

// PutToolSubscription records ts, durably, in place of the one with its
// key.
func (s *Store) PutToolSubscription(ts *ToolSubscription) error {
	if ts.Key == "" {
		return fmt.Errorf("%w: a tool subscription needs a key", ErrInvalid)
	}
	v, err := EncodeToolSubscription(ts)
	if err != nil {
		return err
	}
	return s.update(func(t tx) error {
		return t.put(bucketToolSubscriptions, []byte(ts.Key), v)
	})
}

// EncodeToolSubscription returns the stored form of ts, version and
// checksum included, which DecodeToolSubscription reads.
func EncodeToolSubscription(ts *ToolSubscription) ([]byte, error) {
	v, err := json.Marshal(toolSubscriptionRecord{V: recordVersion, ToolSubscription: ts})
	if err != nil {
		return nil, fmt.Errorf("encode tool subscription: %w", err)
	}
	return seal(v), nil
}

// DeleteToolSubscription removes the subscription with key, durably;
// one that is not there is no error.
func (s *Store) DeleteToolSubscription(key string) error {
	return s.update(func(t tx) error {
		return t.delete(bucketToolSubscriptions, []byte(key))
	})
}

// GetToolSubscription returns the subscription with key, nil when there
// is none.
func (s *Store) GetToolSubscription(key string) (*ToolSubscription, error) {
	var ts *ToolSubscription
	err := s.view(func(t tx) error {
		v := t.get(bucketToolSubscriptions, []byte(key))
		if v == nil {
			return nil
		}
		var err error
		ts, err = DecodeToolSubscription([]byte(key), v)
		return err
	})
	return ts, err
}

// ToolSubscriptions returns every active tool subscription.
func (s *Store) ToolSubscriptions() ([]*ToolSubscription, error) {
	var all []*ToolSubscription
	err := s.view(func(t tx) error {
		return t.each(bucketToolSubscriptions, nil, func(k, v []byte) (bool, error) {
			ts, err := DecodeToolSubscription(k, v)
			if err != nil {
				return false, err
			}
			all = append(all, ts)
			return true, nil
		})
	})
	return all, err
}

// WatchToolSubscriptions calls apply with every subscription the store
// holds, before it returns. A Store has one writer, the bus that opened
// it, which knows its own changes: there are no others to follow, as
// there are on a cluster's store (cluster.Store), so ctx is not kept.
func (s *Store) WatchToolSubscriptions(_ context.Context, apply func(key string, ts *ToolSubscription)) error {
	all, err := s.ToolSubscriptions()
	if err != nil {
		return err
	}
	for _, ts := range all {
		apply(ts.Key, ts)
	}
	return nil
}

// DecodeToolSubscription reads a stored tool subscription, checking its
// checksum, its version, and that it holds the key it is stored under;
// errors wrap ErrInvalid and name the record by its thread, never by its
// key.
func DecodeToolSubscription(key, v []byte) (*ToolSubscription, error) {
	sealed, err := unseal(v)
	if err != nil || !sealed {
		return nil, fmt.Errorf("%w: a tool subscription record: checksum missing or wrong", ErrInvalid)
	}
	rec := toolSubscriptionRecord{ToolSubscription: new(ToolSubscription)}
	if err := json.Unmarshal(v, &rec); err != nil {
		return nil, fmt.Errorf("%w: a tool subscription record: %v", ErrInvalid, err)
	}
	ts := rec.ToolSubscription
	switch {
	case rec.V != recordVersion:
		return nil, fmt.Errorf("%w: tool subscription %s/%s is of version %d; this program reads %d", ErrInvalid, ts.GroupID, ts.ToolCallID, rec.V, recordVersion)
	case ts.Key != string(key):
		return nil, fmt.Errorf("%w: tool subscription %s/%s does not hold the key it is stored under", ErrInvalid, ts.GroupID, ts.ToolCallID)
	}
	return ts, nil
}
