package bus_test

import (
	"context"
	"encoding/json"
	"testing"

	gorilla "github.com/gorilla/websocket"
	"github.com/sourcegraph/jsonrpc2"
	jsonrpc2ws "github.com/sourcegraph/jsonrpc2/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/protocol"
)

// foreignPeer is a peer built from a stack that shares nothing with ours:
// gorilla/websocket for the transport and sourcegraph/jsonrpc2's own
// websocket ObjectStream, answering processMessage with a plain handler.
func foreignPeer(t *testing.T, url, clientID string, received chan<- json.RawMessage) *jsonrpc2.Conn {
	t.Helper()
	ws, _, err := gorilla.DefaultDialer.Dial(url, nil)
	require.NoError(t, err)
	handler := jsonrpc2.HandlerWithError(func(_ context.Context, _ *jsonrpc2.Conn, req *jsonrpc2.Request) (any, error) {
		if req.Method != "processMessage" {
			return nil, &jsonrpc2.Error{Code: jsonrpc2.CodeMethodNotFound, Message: req.Method}
		}
		var p struct {
			Payload json.RawMessage `json:"payload"`
		}
		if err := json.Unmarshal(*req.Params, &p); err != nil {
			return nil, err
		}
		received <- p.Payload
		return map[string]any{"processed": true, "message": "foreign ok"}, nil
	})
	conn := jsonrpc2.NewConn(t.Context(), jsonrpc2ws.NewObjectStream(ws), jsonrpc2.AsyncHandler(handler))
	t.Cleanup(func() { _ = conn.Close() })
	var init map[string]any
	require.NoError(t, conn.Call(t.Context(), "initialize", map[string]any{"clientId": clientID, "clientInfo": map[string]any{"name": "gorilla+sourcegraph"}}, &init))
	assert.Equal(t, "bub-bus", init["serverInfo"].(map[string]any)["name"])
	return conn
}

func TestInteropForeignStack(t *testing.T) {
	srv := bustest.Start(t, nil)
	received := make(chan json.RawMessage, 1)
	sub := foreignPeer(t, srv.URL, "foreign-sub", received)
	var ok map[string]bool
	require.NoError(t, sub.Call(t.Context(), "subscribe", map[string]any{"topic": "interop:*"}, &ok))
	assert.True(t, ok["success"])

	pub := foreignPeer(t, srv.URL, "foreign-pub", nil)
	var result protocol.SendMessageResult
	require.NoError(t, pub.Call(t.Context(), "sendMessage", map[string]any{"topic": "interop:1", "payload": map[string]any{"type": "plaintext_message", "text": "hi"}}, &result))
	assert.JSONEq(t, `{"type":"plaintext_message","text":"hi"}`, string(<-received))
	require.True(t, result.Success)
	assert.Equal(t, []protocol.Ack{{ClientID: "foreign-sub", Subscription: "interop:*", Processed: true, Message: "foreign ok"}}, result.Acks)

	// And our own raw client sees the same bus the same way.
	var viaRaw protocol.SendMessageResult
	bustest.Connect(t, srv.URL, "raw-pub", nil).MustCall("sendMessage", map[string]any{"topic": "interop:2", "payload": map[string]any{"type": "t"}}, &viaRaw)
	<-received
	assert.True(t, viaRaw.Acks[0].Processed)

	// Errors come back as JSON-RPC errors the foreign stack understands.
	err := pub.Call(t.Context(), "subscribe", map[string]any{}, &ok)
	var rpcErr *jsonrpc2.Error
	require.ErrorAs(t, err, &rpcErr)
	assert.Equal(t, int64(protocol.CodeInvalidParams), rpcErr.Code)
}
