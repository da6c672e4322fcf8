package bus

import (
	"slices"
	"strings"

	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/internal/rpcstream"
	"github.com/bub-bus/bub/protocol"
)

// The webhook.* admin methods make, remove and list webhook
// subscriptions at run time. Those made so are kept in the store and
// come back at the next start; those of Options.WebhookSubscriptions
// (the configuration file) are listed but are the file's to change.

// webhookStore is a Store that keeps webhook subscriptions; a cluster's
// does not, and there the methods are refused, as webhook subscriptions
// are.
type webhookStore interface {
	PutWebhook(w *store.Webhook) error
	DeleteWebhook(name string) (bool, error)
	Webhooks() ([]*store.Webhook, error)
}

var _ webhookStore = (*store.Store)(nil)

// restoreWebhooks puts the subscriptions an admin made back in the
// router. One that no longer fits (a name the configuration took since)
// is logged and left in the store, not fatal: the bus serves the rest.
func (s *Server) restoreWebhooks() error {
	ws, ok := s.store.(webhookStore)
	if !ok || s.opts.Cluster != nil {
		return nil
	}
	list, err := ws.Webhooks()
	if err != nil {
		return err
	}
	for _, w := range list {
		if _, err := s.addWebhookSubscription(storedWebhook(w)); err != nil {
			s.log.Error("a webhook subscription made with webhook.add cannot be restored; remove it with bub webhook remove", "webhook", w.Name, "err", err)
		}
	}
	return nil
}

func storedWebhook(w *store.Webhook) WebhookSubscription {
	return WebhookSubscription{Name: w.Name, URL: w.URL, Pattern: w.Pattern, Policy: protocol.Policy(w.Policy), Secret: w.Secret}
}

// webhookRequest decodes a webhook.add or webhook.remove request into
// params and returns the store's webhook side, or the error that refuses
// the request (a cluster's store keeps none).
func (c *conn) webhookRequest(req *rpcstream.Request, params any) (webhookStore, error) {
	if err := decodeParams(req, params); err != nil {
		return nil, err
	}
	ws, ok := c.server.store.(webhookStore)
	if !ok || c.server.opts.Cluster != nil {
		return nil, protocol.Errorf(protocol.ErrInvalidParams, "webhook subscriptions are not yet shared by a cluster's nodes; run them on a single node")
	}
	return ws, nil
}

func (c *conn) webhookAdd(req *rpcstream.Request) (any, error) {
	var p protocol.WebhookAddParams
	ws, err := c.webhookRequest(req, &p)
	if err != nil {
		return nil, err
	}
	s := c.server
	if why := s.webhookAddressRefused(s.ctx, p.URL); why != "" {
		return nil, protocol.Errorf(protocol.ErrInvalidParams, "webhook %q: %s", p.Name, why)
	}
	w := &store.Webhook{Name: p.Name, URL: p.URL, Pattern: p.Pattern, Policy: string(p.Policy), Secret: []byte(p.Secret)}
	u, err := s.addWebhookSubscription(storedWebhook(w))
	if err != nil {
		return nil, protocol.Errorf(protocol.ErrInvalidParams, "webhook %q: %v", p.Name, err)
	}
	if err := ws.PutWebhook(w); err != nil {
		s.removeWebhookSubscription(u)
		return nil, storeError(err)
	}
	s.log.Info("webhook subscription added", "webhook", p.Name, "pattern", p.Pattern, "by", c.id())
	return u.info(), nil
}

func (c *conn) webhookRemove(req *rpcstream.Request) (any, error) {
	var p protocol.WebhookRemoveParams
	ws, err := c.webhookRequest(req, &p)
	if err != nil {
		return nil, err
	}
	s := c.server
	u := s.webhookSubscriber(webhookClientPrefix + p.Name)
	if u != nil && u.configured {
		return nil, protocol.Errorf(protocol.ErrInvalidParams, "webhook %q is in the configuration file; remove it there and restart", p.Name)
	}
	found, err := ws.DeleteWebhook(p.Name)
	if err != nil {
		return nil, storeError(err)
	}
	if u == nil && !found {
		return nil, protocol.Errorf(protocol.ErrInvalidParams, "no webhook subscription %q", p.Name)
	}
	removed := protocol.Webhook{Name: p.Name, ClientID: webhookClientPrefix + p.Name}
	if u != nil {
		removed = u.info()
		s.removeWebhookSubscription(u)
	}
	s.log.Info("webhook subscription removed", "webhook", p.Name, "by", c.id())
	return removed, nil
}

func (c *conn) webhookList(req *rpcstream.Request) (any, error) {
	if err := decodeParams(req, &struct{}{}); err != nil {
		return nil, err
	}
	s := c.server
	s.webhookMu.Lock()
	list := make([]protocol.Webhook, 0, len(s.webhooks))
	for _, u := range s.webhooks {
		list = append(list, u.info())
	}
	s.webhookMu.Unlock()
	slices.SortFunc(list, func(a, b protocol.Webhook) int { return strings.Compare(a.Name, b.Name) })
	return protocol.WebhookListResult{Webhooks: list}, nil
}

// removeWebhookSubscription takes u out of the router and the registry;
// its pending retries find no subscriber and are dead-lettered
// subscriber_gone in time.
func (s *Server) removeWebhookSubscription(u *urlSubscriber) {
	s.webhookMu.Lock()
	if s.webhooks[u.clientID] == u {
		delete(s.webhooks, u.clientID)
	}
	s.webhookMu.Unlock()
	u.close(0, "")
}
