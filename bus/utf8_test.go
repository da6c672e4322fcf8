package bus_test

import (
	"strings"
	"testing"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/internal/checkfor"
	"github.com/bub-bus/bub/protocol"
)

// TestInvalidUTF8NotForwarded: a publish whose text message is not valid
// UTF-8 closes its connection with 1007 (RFC 6455) and reaches no
// subscriber; the next valid message is the first the subscriber gets.
// Such a message once reached a strict subscriber (Node's ws), which
// disconnected on it at every attempt until it was dead-lettered.
func TestInvalidUTF8NotForwarded(t *testing.T) {
	srv := bustest.Start(t, nil)
	got := make(chan protocol.ProcessMessageParams, 4)
	sub := bustest.Connect(t, srv.URL, "strict", func(p protocol.ProcessMessageParams) any {
		got <- p
		return protocol.ProcessMessageResult{Processed: true}
	})
	sub.Subscribe("t:x", "")

	bad := bustest.Connect(t, srv.URL, "sender", nil)
	bad.Send(`{"jsonrpc":"2.0","method":"sendMessage","params":{"topic":"t:x","payload":{"type":"bad","text":"caf` + "\xe9" + `"}},"id":9}`)
	if st := bad.Closed(); st != websocket.StatusInvalidFramePayloadData {
		t.Fatalf("a message that is not UTF-8 closed its sender with %d, want %d", st, websocket.StatusInvalidFramePayloadData)
	}

	good := bustest.Connect(t, srv.URL, "sender2", nil)
	if r := good.Publish("t:x", "good"); len(r.Acks) != 1 || !r.Acks[0].Processed {
		t.Fatalf("the valid message after it: %+v", r)
	}
	if p := <-got; string(p.Payload) != `{"type":"good"}` {
		t.Errorf("the subscriber's first delivery is %s, want the valid message", p.Payload)
	}
	// The sender's read loop counts the close once the close handshake
	// is over, which the sender may see first.
	want := `
# HELP bub_connection_closes_total Connections the bus closed, by reason.
# TYPE bub_connection_closes_total counter
bub_connection_closes_total{reason="text message not valid UTF-8"} 1
`
	checkfor.Check(t, bustest.Timeout, func() error {
		return testutil.GatherAndCompare(srv.Registry(), strings.NewReader(want), "bub_connection_closes_total")
	})
}
