package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// decodeSendMessage is the reference ScanSendMessage is held to: the
// json.Unmarshal decode and payload check the bus made before it read
// params in place.
func decodeSendMessage(params []byte) (p SendMessageParams, payloadErr, err error) {
	if err := json.Unmarshal(params, &p); err != nil {
		return SendMessageParams{}, nil, err
	}
	if len(p.Payload) == 0 {
		return p, fmt.Errorf("payload is required"), nil
	}
	if !IsObject(p.Payload) {
		return p, fmt.Errorf("payload must be a JSON object with a string \"type\""), nil
	}
	var head struct {
		Type *json.RawMessage `json:"type"`
	}
	if err := json.Unmarshal(p.Payload, &head); err != nil {
		return p, fmt.Errorf("payload must be a JSON object: %v", err), nil
	}
	var typ string
	switch {
	case head.Type == nil:
		payloadErr = fmt.Errorf("payload.type is required")
	case json.Unmarshal(*head.Type, &typ) != nil:
		payloadErr = fmt.Errorf("payload.type must be a string, got %s", *head.Type)
	case typ == "":
		payloadErr = fmt.Errorf("payload.type must not be empty")
	}
	return p, payloadErr, nil
}

// FuzzScanSendMessage holds ScanSendMessage to json.Unmarshal: the same
// topic, payload and meta bytes, the same payload verdict, and the same
// error naming the same field.
func FuzzScanSendMessage(f *testing.F) {
	for _, seed := range []string{
		`{"topic":"a","payload":{"type":"t"}}`,
		`{"topic":"a","payload":{"type":"t","x":[1,"]"]},"meta":{"traceparent":"00"}}`,
		`{"TOPIC":"a\u00e9","Payload":{"Type":"t"},"meta":null}`,
		`{"topic":1,"payload":{"type":"t"}}`, `{"topic":"x","topic":null,"payload":{"type":""}}`,
		`{"topic":[1],"topic":"y","payload":{"type":3}}`, `{"payload":null}`, `{"payload":[1]}`,
		`{"payload":{"type":"a","type":null}}`, `{"payload":{"type":{"a":1}}}`, `{"\u0074opic":"t","payload":{"\u0074ype":"\ud800"}}`,
		`{"topic":"t","payload":{"type":"t"},"meta":"x"}`, `{"topic":true}`, `{"topic":{}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, params []byte) {
		if !json.Valid(params) || !IsObject(params) {
			return
		}
		want, wantPayloadErr, wantErr := decodeSendMessage(params)
		got, gotPayloadErr, gotErr := ScanSendMessage(params)
		if (gotErr == nil) != (wantErr == nil) {
			t.Fatalf("%s: error %v, json.Unmarshal says %v", params, gotErr, wantErr)
		}
		if wantErr != nil {
			var w, g *json.UnmarshalTypeError
			if !errors.As(wantErr, &w) || !errors.As(gotErr, &g) {
				t.Fatalf("%s: errors %v and %v are not both type errors", params, gotErr, wantErr)
			}
			if g.Field != w.Field || g.Value != w.Value || g.Type != w.Type {
				t.Fatalf("%s: error %+v, json.Unmarshal says %+v", params, g, w)
			}
			return
		}
		if got.Topic != want.Topic || !bytes.Equal(got.Payload, want.Payload) || !bytes.Equal(got.Meta, want.Meta) || (got.Meta == nil) != (want.Meta == nil) {
			t.Fatalf("%s: read %q %q %q, json.Unmarshal %q %q %q", params, got.Topic, got.Payload, got.Meta, want.Topic, want.Payload, want.Meta)
		}
		if fmt.Sprint(gotPayloadErr) != fmt.Sprint(wantPayloadErr) {
			t.Fatalf("%s: payload verdict %v, want %v", params, gotPayloadErr, wantPayloadErr)
		}
	})
}

func TestPayloadType(t *testing.T) {
	tests := []struct {
		payload, typ, err string
	}{
		{`{"type":"task_request","x":1}`, "task_request", ""},
		{`{"Type":"t\u00e9"}`, "té", ""},
		{``, "", "payload is required"},
		{`[1]`, "", `payload must be a JSON object with a string "type"`},
		{`{"type":`, "", "payload must be a JSON object: unexpected end of JSON input"},
		{`{"text":"hi"}`, "", "payload.type is required"},
		{`{"type":3}`, "", "payload.type must be a string, got 3"},
		{`{"type":""}`, "", "payload.type must not be empty"},
	}
	for _, tt := range tests {
		typ, err := PayloadType(json.RawMessage(tt.payload))
		if typ != tt.typ || fmt.Sprint(err) != map[bool]string{true: "<nil>", false: tt.err}[tt.err == ""] {
			t.Errorf("PayloadType(%s) = %q, %v; want %q, %q", tt.payload, typ, err, tt.typ, tt.err)
		}
	}
}

// sendParams is a 1 KiB sendMessage params object, as the relay
// benchmarks send.
var sendParams = []byte(`{"topic":"agent:analyzer","payload":{"type":"task_request","text":"` + strings.Repeat("lorem ipsum ", 80) + `"},"meta":{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}`)

// BenchmarkScanSendMessage reads params in place, as the bus does;
// BenchmarkDecodeSendMessage is the json.Unmarshal decode and payload
// check that reading in place saves. Neither counts the json.Valid pass the
// Stream makes over the whole message.
func BenchmarkScanSendMessage(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(sendParams)))
	for b.Loop() {
		if _, perr, err := ScanSendMessage(sendParams); err != nil || perr != nil {
			b.Fatal(err, perr)
		}
	}
}

func BenchmarkDecodeSendMessage(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(sendParams)))
	for b.Loop() {
		if _, perr, err := decodeSendMessage(sendParams); err != nil || perr != nil {
			b.Fatal(err, perr)
		}
	}
}
