package cluster

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestDeliveryFrameRoundTrip(t *testing.T) {
	for _, d := range []*Delivery{
		{},
		{ClientID: "agent:one", Conn: 1<<64 - 1, Pattern: "order:*", Attempt: 1<<32 - 1, Payload: []byte(`{"a":1}`)},
		{ClientID: "ü", Pattern: "", Attempt: 3, Payload: bytes.Repeat([]byte{0}, 300)},
		{ClientID: "c", Payload: []byte(`{"payload":"é € 😀"}`)},
	} {
		got, err := parseDelivery(appendDelivery(nil, d))
		if err != nil {
			t.Fatalf("%+v: %v", d, err)
		}
		if got.ClientID != d.ClientID || got.Conn != d.Conn || got.Pattern != d.Pattern || got.Attempt != d.Attempt || !bytes.Equal(got.Payload, d.Payload) {
			t.Errorf("round trip: got %+v, want %+v", got, d)
		}
	}
}

func TestParseDeliveryRejects(t *testing.T) {
	good := appendDelivery(nil, &Delivery{ClientID: "c", Pattern: "p", Payload: []byte("x")})
	for name, b := range map[string][]byte{
		"empty":            nil,
		"other version":    append([]byte{2}, good[1:]...),
		"truncated id":     {frameVersion, 5, 'a'},
		"bad varint":       {frameVersion, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
		"attempt too big":  {frameVersion, 0, 0, 0, 0x80, 0x80, 0x80, 0x80, 0x10},
		"ends before conn": {frameVersion, 0},
	} {
		if _, err := parseDelivery(b); !errors.Is(err, ErrBadFrame) {
			t.Errorf("%s: %v, want ErrBadFrame", name, err)
		}
	}
	// A node writes the payload to its subscriber as a text message.
	notUTF8 := appendDelivery(nil, &Delivery{ClientID: "c", Pattern: "p", Payload: []byte(`{"payload":"` + "\xff" + `"}`)})
	if _, err := parseDelivery(notUTF8); !errors.Is(err, ErrBadFrame) || !strings.Contains(err.Error(), "UTF-8") {
		t.Errorf("payload not UTF-8: %v, want ErrBadFrame naming UTF-8", err)
	}
}

// FuzzParseDelivery: any bytes from the network parse or fail with
// ErrBadFrame, never panic, what parses has a payload of valid UTF-8
// (a subscriber gets it as a text message), and frames back to the same.
func FuzzParseDelivery(f *testing.F) {
	f.Add(appendDelivery(nil, &Delivery{ClientID: "agent", Conn: 7, Pattern: "a:*", Attempt: 2, Payload: []byte(`{}`)}))
	f.Add([]byte{frameVersion})
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := parseDelivery(b)
		if err != nil {
			if !errors.Is(err, ErrBadFrame) {
				t.Fatalf("error not ErrBadFrame: %v", err)
			}
			return
		}
		if !utf8.Valid(d.Payload) {
			t.Fatalf("payload %q is not valid UTF-8", d.Payload)
		}
		again, err := parseDelivery(appendDelivery(nil, d))
		if err != nil || again.ClientID != d.ClientID || again.Conn != d.Conn || again.Pattern != d.Pattern ||
			again.Attempt != d.Attempt || !bytes.Equal(again.Payload, d.Payload) {
			t.Fatalf("re-framed %+v differs: %+v, %v", d, again, err)
		}
	})
}
