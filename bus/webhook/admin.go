package webhook

import (
	"context"
	"encoding/json"
	"slices"
	"strings"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/protocol"
)

// The webhook.* admin methods make, remove and list webhook
// subscriptions at run time. Those made so are kept in the store and
// come back at the next start; those of Options.Subscriptions (the
// configuration file) are listed but are the file's to change.

// restore puts the subscriptions an admin made back in the router. One
// that no longer fits (a name the configuration took since) is logged
// and left in the store, not fatal: the bus serves the rest.
func (w *webhooks) restore() error {
	if w.opts.Store == nil || w.clustered {
		return nil
	}
	list, err := w.opts.Store.Webhooks()
	if err != nil {
		return err
	}
	for _, sw := range list {
		if _, err := w.subscribe(storedWebhook(sw), false); err != nil {
			w.log.Error("a webhook subscription made with webhook.add cannot be restored; remove it with bub webhook remove", "webhook", sw.Name, "err", err)
		}
	}
	return nil
}

func storedWebhook(w *store.Webhook) Subscription {
	return Subscription{Name: w.Name, URL: w.URL, Pattern: w.Pattern, Policy: protocol.Policy(w.Policy), Secret: w.Secret, PayloadField: w.PayloadField, Headers: w.Headers}
}

// request decodes a webhook.add or webhook.remove request into params
// and returns the store that keeps the subscriptions, or the error that
// refuses the request (a cluster keeps none).
func (w *webhooks) request(method string, raw json.RawMessage, params any) (*store.Store, error) {
	if err := bus.DecodeParams(method, raw, params); err != nil {
		return nil, err
	}
	if w.clustered {
		return nil, protocol.Errorf(protocol.ErrInvalidParams, "%v", errNotShared)
	}
	if w.opts.Store == nil {
		return nil, protocol.Errorf(protocol.ErrInvalidParams, "this bus keeps no webhook subscriptions made at run time: it was started without a store for them")
	}
	return w.opts.Store, nil
}

// storeError is the error of a failed write of the store: the caller's
// arguments are not at fault.
func storeError(err error) error {
	return protocol.Errorf(protocol.ErrInternal, "store: %v", err)
}

func (w *webhooks) add(ctx context.Context, caller *bus.Caller, raw json.RawMessage) (any, error) {
	var p protocol.WebhookAddParams
	st, err := w.request(protocol.MethodWebhookAdd, raw, &p)
	if err != nil {
		return nil, err
	}
	if why := w.addressRefused(ctx, p.URL); why != "" {
		return nil, protocol.Errorf(protocol.ErrInvalidParams, "webhook %q: %s", p.Name, why)
	}
	sw := &store.Webhook{Name: p.Name, URL: p.URL, Pattern: p.Pattern, Policy: string(p.Policy), Secret: []byte(p.Secret), PayloadField: p.PayloadField, Headers: p.Headers}
	u, err := w.subscribe(storedWebhook(sw), false)
	if err != nil {
		return nil, protocol.Errorf(protocol.ErrInvalidParams, "webhook %q: %v", p.Name, err)
	}
	if err := st.PutWebhook(sw); err != nil {
		w.unsubscribe(u)
		return nil, storeError(err)
	}
	w.log.Info("webhook subscription added", "webhook", p.Name, "pattern", p.Pattern, "by", caller.ClientID())
	return u.info, nil
}

func (w *webhooks) remove(_ context.Context, caller *bus.Caller, raw json.RawMessage) (any, error) {
	var p protocol.WebhookRemoveParams
	st, err := w.request(protocol.MethodWebhookRemove, raw, &p)
	if err != nil {
		return nil, err
	}
	u := w.subscriber(clientPrefix + p.Name)
	if u != nil && u.info.Configured {
		return nil, protocol.Errorf(protocol.ErrInvalidParams, "webhook %q is in the configuration file; remove it there and restart", p.Name)
	}
	found, err := st.DeleteWebhook(p.Name)
	if err != nil {
		return nil, storeError(err)
	}
	if u == nil && !found {
		return nil, protocol.Errorf(protocol.ErrInvalidParams, "no webhook subscription %q", p.Name)
	}
	removed := protocol.Webhook{Name: p.Name, ClientID: clientPrefix + p.Name}
	if u != nil {
		removed = u.info
		w.unsubscribe(u)
	}
	w.log.Info("webhook subscription removed", "webhook", p.Name, "by", caller.ClientID())
	return removed, nil
}

func (w *webhooks) list(_ context.Context, _ *bus.Caller, raw json.RawMessage) (any, error) {
	if err := bus.DecodeParams(protocol.MethodWebhookList, raw, &struct{}{}); err != nil {
		return nil, err
	}
	w.mu.Lock()
	list := make([]protocol.Webhook, 0, len(w.subs))
	for _, u := range w.subs {
		list = append(list, u.info)
	}
	w.mu.Unlock()
	slices.SortFunc(list, func(a, b protocol.Webhook) int { return strings.Compare(a.Name, b.Name) })
	return protocol.WebhookListResult{Webhooks: list}, nil
}
