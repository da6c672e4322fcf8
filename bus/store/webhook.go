package store

import (
	"encoding/json"
	"fmt"
)

// bucketWebhooks maps a webhook subscription's name to the subscription,
// for those an admin made at run time (webhook.add): they are the bus's
// configuration, kept until webhook.remove.
const bucketWebhooks bucket = "webhooks"

// Webhook is a webhook subscription as the store keeps it. Secret signs
// its deliveries: the store is as private as the bus's credentials.
type Webhook struct {
	Name    string `json:"name"`
	URL     string `json:"url"`
	Pattern string `json:"pattern"`
	Policy  string `json:"policy,omitempty"`
	Secret  []byte `json:"secret"`
	// PayloadField and Headers are webhook.add's (protocol.WebhookAddParams).
	PayloadField string            `json:"payloadField,omitempty"`
	Headers      map[string]string `json:"headers,omitempty"`
}

// PutWebhook keeps w, durably, replacing one of the same name.
func (s *Store) PutWebhook(w *Webhook) error {
	v, err := json.Marshal(w)
	if err != nil {
		return fmt.Errorf("encode webhook %s: %w", w.Name, err)
	}
	return s.update(func(t tx) error { return t.put(bucketWebhooks, []byte(w.Name), seal(v)) })
}

// DeleteWebhook removes the webhook subscription name and reports
// whether there was one.
func (s *Store) DeleteWebhook(name string) (found bool, err error) {
	err = s.update(func(t tx) error {
		if t.get(bucketWebhooks, []byte(name)) == nil {
			return nil
		}
		found = true
		return t.delete(bucketWebhooks, []byte(name))
	})
	return found, err
}

// Webhooks returns the kept webhook subscriptions, by name.
func (s *Store) Webhooks() ([]*Webhook, error) {
	var list []*Webhook
	err := s.view(func(t tx) error {
		return t.each(bucketWebhooks, nil, func(k, v []byte) (bool, error) {
			if sealed, err := unseal(v); err != nil || !sealed {
				return false, fmt.Errorf("%w: webhook %q: checksum missing or wrong", ErrInvalid, k)
			}
			w := new(Webhook)
			if err := json.Unmarshal(v, w); err != nil {
				return false, fmt.Errorf("%w: webhook %q: %v", ErrInvalid, k, err)
			}
			list = append(list, w)
			return true, nil
		})
	})
	return list, err
}
