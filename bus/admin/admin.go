// Package admin is the operator's administration of a bus, an add-on
// (bus.Extension): the dead-letter queue's methods (dlq.list, dlq.get,
// dlq.replay, dlq.purge), the durable subscriptions' (subscriptions.list,
// subscriptions.remove) and GET /backup, the store's copy. Add
// Extension{} to bus.Options.Extensions; bub serve does.
//
// With authentication on, only a credential with admin may call them;
// without it any initialized peer may call the methods, and only
// loopback may take the backup, which is why bub serve listens on
// loopback by default (docs/SECURITY.md).
package admin

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/protocol"
)

// BackupPath is the HTTP endpoint that streams a consistent copy of the
// store (GET). bub backup calls it.
const BackupPath = "/backup"

// maxListLimit bounds a dlq.list or subscriptions.list page, so one call
// cannot load the whole queue into memory.
const maxListLimit = 1000

// Extension is the administration of one bus or several (a cluster's
// nodes in one process): it keeps nothing of its own.
type Extension struct{}

// Extend registers the methods and GET /backup on s.
func (Extension) Extend(s *bus.Server) error {
	a := &admin{s: s}
	for name, serve := range map[string]func(context.Context, *bus.Caller, json.RawMessage) (any, error){
		protocol.MethodDLQList:             a.dlqList,
		protocol.MethodDLQGet:              a.dlqGet,
		protocol.MethodDLQReplay:           a.dlqReplay,
		protocol.MethodDLQPurge:            a.dlqPurge,
		protocol.MethodSubscriptionsList:   a.subscriptionsList,
		protocol.MethodSubscriptionsRemove: a.subscriptionsRemove,
	} {
		if err := s.HandleMethod(name, bus.Method{Admin: true, Serve: serve}); err != nil {
			return err
		}
	}
	if err := s.Handle(BackupPath, http.HandlerFunc(a.serveBackup)); err != nil {
		return err
	}
	return nil
}

// admin is the administration of one bus.
type admin struct {
	s *bus.Server
}

func (a *admin) dlqList(_ context.Context, _ *bus.Caller, params json.RawMessage) (any, error) {
	var p protocol.DLQListParams
	if err := bus.DecodeParams(protocol.MethodDLQList, params, &p); err != nil {
		return nil, err
	}
	if p.Limit > maxListLimit {
		return nil, protocol.Errorf(protocol.ErrInvalidParams, "limit %d is more than %d; page with the cursor", p.Limit, maxListLimit)
	}
	entries, next, err := a.s.DeadLetterQueue().List(storeFilter(p.DLQFilter), p.Cursor, p.Limit)
	if err != nil {
		return nil, err
	}
	return protocol.DLQListResult{Entries: entries, NextCursor: next}, nil
}

func (a *admin) dlqGet(_ context.Context, _ *bus.Caller, params json.RawMessage) (any, error) {
	var p protocol.DLQGetParams
	if err := bus.DecodeParams(protocol.MethodDLQGet, params, &p); err != nil {
		return nil, err
	}
	if p.ID == "" {
		return nil, protocol.Errorf(protocol.ErrInvalidParams, "id is required")
	}
	return a.s.DeadLetterQueue().Get(p.ID)
}

func (a *admin) dlqReplay(_ context.Context, caller *bus.Caller, params json.RawMessage) (any, error) {
	var p protocol.DLQReplayParams
	if err := bus.DecodeParams(protocol.MethodDLQReplay, params, &p); err != nil {
		return nil, err
	}
	result, err := a.s.DeadLetterQueue().Replay(p.IDs, p.To)
	if protocol.CodeOf(err) == protocol.CodeLimitReached {
		caller.Logger().Info("dlq.replay refused: limit reached", "client", caller.ClientID(), "limit", "max_replay_ids", "max", a.s.Limits().MaxReplayIDs, "ids", len(p.IDs))
	}
	if err != nil {
		return nil, err
	}
	return result, nil
}

func (a *admin) dlqPurge(_ context.Context, _ *bus.Caller, params json.RawMessage) (any, error) {
	var p protocol.DLQPurgeParams
	if err := bus.DecodeParams(protocol.MethodDLQPurge, params, &p); err != nil {
		return nil, err
	}
	if p.ID != "" && (p.All || p.DLQFilter != protocol.DLQFilter{}) {
		// Narrowing to the id, or ignoring it, would each purge other
		// than what one of the two readings meant.
		return nil, protocol.Errorf(protocol.ErrInvalidParams, "purge by id %q or by filter (topic, reason, since, until) or all, not both", p.ID)
	}
	if p.ID == "" && !p.All && p.DLQFilter == (protocol.DLQFilter{}) {
		return nil, protocol.Errorf(protocol.ErrInvalidParams, "say what to purge: an id, a filter (topic, reason, since, until), or all: true")
	}
	n, err := a.s.DeadLetterQueue().PurgeObserved(p.ID, storeFilter(p.DLQFilter))
	if err != nil {
		return nil, err
	}
	return protocol.DLQPurgeResult{Purged: n}, nil
}

// storeFilter converts a wire filter; the store checks the pattern and
// the reason, and the queue turns its refusal into -32602.
func storeFilter(f protocol.DLQFilter) store.Filter {
	return store.Filter{Topic: f.Topic, Reason: f.Reason, Since: f.Since, Until: f.Until}
}
