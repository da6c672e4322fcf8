package peer

import (
	"context"
	"encoding/json"
)

// Call makes any JSON-RPC call on the bus and decodes its result into
// result (a pointer, or nil to discard it). It is for methods the SDK has
// no wrapper for, such as the dlq.* administration methods. params is raw
// JSON (json.RawMessage or []byte), sent as it is, or a value to marshal;
// nil sends an empty object. Errors are as for SendMessage: the bus's
// answer as a *protocol.Error, ErrDisconnected or ErrClosed when there is
// no connection, ErrCallTimeout after Options.CallTimeout.
func (c *Conn) Call(ctx context.Context, method string, params, result any) error {
	if params == nil {
		params = json.RawMessage(`{}`)
	}
	return c.call(ctx, method, params, result)
}
