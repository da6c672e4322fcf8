package rpcstream_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"time"

	"github.com/coder/websocket"

	"github.com/bub-bus/bub/internal/outbound"
	"github.com/bub-bus/bub/internal/rpcstream"
)

// A subscriber answers each processMessage with a result it encodes by
// hand into a buffer on its stack, which ReplyRaw writes as it is.
func ExampleStream_ReplyRaw() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, out, err := outbound.Accept(w, r, nil, 5*time.Second)
		if err != nil {
			return
		}
		s := rpcstream.NewOutbound(ws, out)
		for {
			req, err := s.ReadRequest()
			if err != nil {
				return
			}
			var buf [64]byte
			result := strconv.AppendBool(append(buf[:0], `{"processed":`...), req.Method == "processMessage")
			_ = s.ReplyRaw(req.ID, append(result, '}'))
		}
	}))
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws"+srv.URL[len("http"):], nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ws.CloseNow()
	_ = ws.Write(ctx, websocket.MessageText, []byte(`{"jsonrpc":"2.0","id":7,"method":"processMessage","params":{}}`))
	_, answer, err := ws.Read(ctx)
	fmt.Println(string(answer), err)
	// Output: {"id":7,"result":{"processed":true},"jsonrpc":"2.0"} <nil>
}
