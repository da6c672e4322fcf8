package admin

import (
	"context"
	"encoding/json"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/protocol"
)

func (a *admin) subscriptionsList(_ context.Context, _ *bus.Caller, params json.RawMessage) (any, error) {
	var p protocol.SubscriptionsListParams
	if err := bus.DecodeParams(protocol.MethodSubscriptionsList, params, &p); err != nil {
		return nil, err
	}
	if p.Limit > maxListLimit || p.Limit < 0 {
		return nil, protocol.Errorf(protocol.ErrInvalidParams, "limit %d is not between 0 and %d; page with the cursor", p.Limit, maxListLimit)
	}
	if p.Topic != "" {
		if err := protocol.ValidateTopic(p.Topic); err != nil {
			return nil, protocol.Errorf(protocol.ErrInvalidParams, "topic: %v", err)
		}
	}
	return a.s.DurableSubscriptions().List(p), nil
}

func (a *admin) subscriptionsRemove(_ context.Context, caller *bus.Caller, params json.RawMessage) (any, error) {
	var p protocol.SubscriptionsRemoveParams
	if err := bus.DecodeParams(protocol.MethodSubscriptionsRemove, params, &p); err != nil {
		return nil, err
	}
	if p.ClientID == "" || p.Topic == "" {
		return nil, protocol.Errorf(protocol.ErrInvalidParams, "clientId and topic are required")
	}
	found, err := a.s.DurableSubscriptions().Remove(p.ClientID, p.Topic)
	if err != nil {
		return nil, protocol.Errorf(protocol.ErrInternal, "remove %q of %q: %v", p.Topic, p.ClientID, err)
	}
	if !found {
		return nil, protocol.Errorf(protocol.ErrNotFound, "client %q holds no durable subscription to %q", p.ClientID, p.Topic)
	}
	caller.Logger().Info("durable subscription removed by an operator", "client", p.ClientID, "pattern", p.Topic, "by", caller.ClientID())
	return protocol.SuccessResult{Success: true}, nil
}
