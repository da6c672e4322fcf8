package store

import (
	"fmt"
	"time"
)

// bucketDurable maps a clientId to its durable subscriptions and its
// waker (DurableOwner).
const bucketDurable bucket = "durable"

// DurableOwner is what the bus keeps of a clientId that holds durable
// subscriptions, or has a waker: the subscriptions outlive the owner's
// connections and the bus's restarts, and the waker is told when a
// message is held for the owner while it is away. One record per
// clientId, so that a change of the owner is one write.
type DurableOwner struct {
	ClientID string `json:"clientId"`
	// Identity is the credential the owner last subscribed with ("" on
	// an open bus): whom the messages held for it count against.
	Identity string `json:"identity,omitempty"`
	// MaxPending is its grant's cap on what counts against it, as its
	// last subscribe saw it; zero: the bus's.
	MaxPending int `json:"maxPending,omitempty"`
	// Waker is the clientId told when a message is held for the owner
	// while it is away; "" for none.
	Waker         string                `json:"waker,omitempty"`
	Subscriptions []DurableSubscription `json:"subscriptions,omitempty"`
}

// DurableSubscription is one durable subscription of its owner.
type DurableSubscription struct {
	Pattern  string `json:"pattern"`
	Policy   string `json:"policy"`
	Fallback bool   `json:"fallback,omitempty"`
	// Created orders the owner's subscriptions across a restart, where
	// last match wins.
	Created time.Time `json:"created"`
}

type durableRecord struct {
	Version int `json:"v"`
	DurableOwner
}

func (r *durableRecord) header() (int, string) { return r.Version, r.ClientID }
func (r *durableRecord) check() error          { return checkDurable(&r.DurableOwner) }

// checkDurable checks the rules for an owner's fields.
func checkDurable(o *DurableOwner) error {
	if o.ClientID == "" {
		return fmt.Errorf("%w: a durable owner needs a client id", ErrInvalid)
	}
	seen := make(map[string]bool, len(o.Subscriptions))
	for i, sub := range o.Subscriptions {
		switch {
		case sub.Pattern == "":
			return fmt.Errorf("%w: durable subscription %d of %q has no pattern", ErrInvalid, i, o.ClientID)
		case sub.Policy == "":
			return fmt.Errorf("%w: durable subscription %q of %q has no policy", ErrInvalid, sub.Pattern, o.ClientID)
		case seen[sub.Pattern]:
			return fmt.Errorf("%w: durable subscription %q of %q is there twice", ErrInvalid, sub.Pattern, o.ClientID)
		}
		seen[sub.Pattern] = true
	}
	return nil
}

// EncodeDurable checks o and returns its stored form, versioned and
// checksummed as every record is.
func EncodeDurable(o *DurableOwner) ([]byte, error) {
	if err := checkDurable(o); err != nil {
		return nil, err
	}
	b, err := encode(durableRecord{Version: recordVersion, DurableOwner: *o})
	if err != nil {
		return nil, err
	}
	return seal(b), nil
}

// DecodeDurable decodes an owner record written by EncodeDurable and
// checks it: its checksum, its version, that it is clientID's, and its
// fields.
func DecodeDurable(clientID string, v []byte) (*DurableOwner, error) {
	var r durableRecord
	if err := decodeRecord(clientID, v, &r); err != nil {
		return nil, fmt.Errorf("decode durable record of %q: %w", clientID, err)
	}
	return &r.DurableOwner, nil
}

// PutDurable stores o, replacing what its clientId had; an owner with
// neither subscriptions nor a waker is removed instead. The write is
// committed, fsync included, before PutDurable returns.
func (s *Store) PutDurable(o *DurableOwner) error {
	if len(o.Subscriptions) == 0 && o.Waker == "" {
		return s.DeleteDurable(o.ClientID)
	}
	v, err := EncodeDurable(o)
	if err == nil {
		err = s.update(func(t tx) error { return t.put(bucketDurable, []byte(o.ClientID), v) })
	}
	if err != nil {
		return fmt.Errorf("put durable subscriptions of %q: %w", o.ClientID, err)
	}
	return nil
}

// DeleteDurable removes clientID's record; removing one that is not
// there is not an error.
func (s *Store) DeleteDurable(clientID string) error {
	if err := s.update(func(t tx) error { return t.delete(bucketDurable, []byte(clientID)) }); err != nil {
		return fmt.Errorf("delete durable subscriptions of %q: %w", clientID, err)
	}
	return nil
}

// DurableOwners returns every owner record, in clientId order.
func (s *Store) DurableOwners() ([]*DurableOwner, error) {
	var all []*DurableOwner
	err := s.view(func(t tx) error {
		return t.each(bucketDurable, nil, func(k, v []byte) (bool, error) {
			o, err := DecodeDurable(string(k), v)
			if err != nil {
				return false, err
			}
			all = append(all, o)
			return true, nil
		})
	})
	if err != nil {
		return nil, s.where(fmt.Errorf("list durable subscriptions: %w", err))
	}
	return all, nil
}
