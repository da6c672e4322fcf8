package bus_test

import (
	"testing"

	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/protocol"
)

// A payload and its meta reach the subscriber byte for byte as the
// publisher sent them: key order, spacing and characters encoding/json
// would escape are all kept.
func TestPayloadPassesThroughVerbatim(t *testing.T) {
	srv := bustest.Start(t, nil)
	got := make(chan protocol.ProcessMessageParams, 1)
	bustest.Connect(t, srv.URL, "sub", func(p protocol.ProcessMessageParams) any {
		got <- p
		return protocol.ProcessMessageResult{Processed: true}
	}).Subscribe("verbatim", "")
	pub := bustest.Connect(t, srv.URL, "pub", nil)
	const payload = `{"type":"t", "z":1,"a":"<&>","u":"\u00e9"}`
	const meta = `{ "traceparent":"x" }`
	pub.Send(`{"jsonrpc":"2.0","method":"sendMessage","params":{"topic":"verbatim","payload":` + payload + `,"meta":` + meta + `},"id":1}`)
	p := <-got
	if string(p.Payload) != payload {
		t.Errorf("payload = %s, want %s", p.Payload, payload)
	}
	if string(p.Meta) != meta {
		t.Errorf("meta = %s, want %s", p.Meta, meta)
	}
	pub.Recv()
}
