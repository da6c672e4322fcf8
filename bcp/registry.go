package bcp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
)

// SubscriptionKey identifies a subscription. The controller is part of the
// key because subscription ids are unique only within a channel: two
// controllers may both subscribe to one reader with the same id.
type SubscriptionKey struct {
	Reader     string
	Controller string
	ID         string
}

// ActiveSubscription is a subscription as its Reader sees it. It marshals
// as an entry of the bcp_subscriptions_active message: subscription_id,
// controller, then the spec's keys.
type ActiveSubscription struct {
	Controller string
	Subscription
}

// MarshalJSON writes the flat shape of bcp-subscriptions.md.
func (a ActiveSubscription) MarshalJSON() ([]byte, error) {
	spec := []byte("{}")
	if a.Spec != nil {
		var err error
		if spec, err = json.Marshal(a.Spec); err != nil {
			return nil, err
		}
	}
	var b bytes.Buffer
	b.WriteString(`{"subscription_id":`)
	b.Write(marshalString(a.ID))
	b.WriteString(`,"controller":`)
	b.Write(marshalString(a.Controller))
	if a.MaxPushesPerHour > 0 {
		fmt.Fprintf(&b, `,"max_pushes_per_hour":%d`, a.MaxPushesPerHour)
	}
	if len(spec) > 2 { // spec is "{...}"; "{}" adds nothing
		b.WriteByte(',')
		b.Write(spec[1:])
	} else {
		b.WriteByte('}')
	}
	return b.Bytes(), nil
}

// Registry indexes checked definitions for a gateway. It is immutable once
// built, so it is safe for concurrent use.
type Registry struct {
	defs     map[string]*Definition
	subs     map[SubscriptionKey]*Subscription
	byReader map[string][]ActiveSubscription
}

// NewRegistry checks the definitions together ([CheckDefinitions]) and
// indexes their subscriptions by (reader, controller, subscription id).
func NewRegistry(defs []*Definition) (*Registry, error) {
	if err := CheckDefinitions(defs); err != nil {
		return nil, err
	}
	r := &Registry{
		defs:     map[string]*Definition{},
		subs:     map[SubscriptionKey]*Subscription{},
		byReader: map[string][]ActiveSubscription{},
	}
	for _, d := range defs {
		r.defs[d.Name] = d
	}
	names := make([]string, 0, len(defs))
	for name := range r.defs {
		names = append(names, name)
	}
	sort.Strings(names) // stable ForReader order, whatever order defs came in
	for _, name := range names {
		d := r.defs[name]
		for i := range d.Channels {
			c := &d.Channels[i]
			for j := range c.Subscriptions {
				s := &c.Subscriptions[j]
				r.subs[SubscriptionKey{Reader: c.Peer, Controller: d.Name, ID: s.ID}] = s
				r.byReader[c.Peer] = append(r.byReader[c.Peer], ActiveSubscription{Controller: d.Name, Subscription: *s})
			}
		}
	}
	return r, nil
}

// Definition returns the definition of the named agent, or nil.
func (r *Registry) Definition(name string) *Definition {
	return r.defs[name]
}

// Subscription looks up the spec a Reader publishes against. It fails with
// code subscription_not_found when that controller declared no such
// subscription for that reader.
func (r *Registry) Subscription(reader, controller, id string) (*Subscription, error) {
	s := r.subs[SubscriptionKey{Reader: reader, Controller: controller, ID: id}]
	if s == nil {
		return nil, newError(CodeSubscriptionNotFound, "", fmt.Sprintf("no active subscription %q from controller %q", truncate(id, maxNameLen), truncate(controller, maxNameLen)))
	}
	return s, nil
}

// ForReader lists the subscriptions targeting a reader, by controller name
// and then in declaration order: what the gateway sends the Reader in
// bcp_subscriptions_active when its session starts.
func (r *Registry) ForReader(reader string) []ActiveSubscription {
	return append([]ActiveSubscription(nil), r.byReader[reader]...)
}
