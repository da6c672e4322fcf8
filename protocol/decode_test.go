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

// sameTypeError fails unless got and want, the errors of a scan and of
// json.Unmarshal on params, are both nil or both the same type error: the
// same field, value and type, and so the same text.
func sameTypeError(t *testing.T, params []byte, got, want error) {
	t.Helper()
	if (got == nil) != (want == nil) {
		t.Fatalf("%s: error %v, json.Unmarshal says %v", params, got, want)
	}
	if want == nil {
		return
	}
	var w, g *json.UnmarshalTypeError
	if !errors.As(want, &w) || !errors.As(got, &g) {
		t.Fatalf("%s: errors %v and %v are not both type errors", params, got, want)
	}
	if g.Field != w.Field || g.Value != w.Value || g.Type != w.Type || g.Error() != w.Error() {
		t.Fatalf("%s: error %+v (%v), json.Unmarshal says %+v (%v)", params, g, g, w, w)
	}
}

// FuzzScanProcessMessage holds ScanProcessMessage to json.Unmarshal into
// ProcessMessageParams: the same fields, payload and meta byte for byte
// (null included), and the same error for the same inputs.
func FuzzScanProcessMessage(f *testing.F) {
	for _, seed := range []string{
		`{"topic":"a","subscription":"a*","payload":{"type":"t"},"messageId":"m-1","from":"p","attempt":1}`,
		`{"topic":"a","payload":{"type":"t"},"meta":{"traceparent":"00"},"attempt":2,"extra":[1,"]"]}`,
		`{"TOPIC":"a\u00e9","MessageID":"x","Attempt":3,"meta":null,"payload":null}`,
		`{"topic":1}`, `{"attempt":1.5}`, `{"attempt":1e2}`, `{"attempt":"1"}`, `{"attempt":99999999999999999999}`,
		`{"attempt":null,"from":null,"from":"z"}`, `{"from":true,"topic":[1]}`, `{"\u0074opic":"t","subscription":"\ud800"}`,
		`[1]`, `null`, `"s"`, `{}`, `{"attempt":-0}`, `{"topic":{"a":1}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, params []byte) {
		if !json.Valid(params) {
			return
		}
		params = bytes.TrimSpace(params)
		var want ProcessMessageParams
		wantErr := json.Unmarshal(params, &want)
		got, gotErr := ScanProcessMessage(params)
		sameTypeError(t, params, gotErr, wantErr)
		if wantErr != nil {
			return
		}
		if got.Topic != want.Topic || got.Subscription != want.Subscription || got.MessageID != want.MessageID ||
			got.From != want.From || got.Attempt != want.Attempt {
			t.Fatalf("%s: read %+v, json.Unmarshal %+v", params, got, want)
		}
		for _, pair := range [][2]json.RawMessage{{got.Payload, want.Payload}, {got.Meta, want.Meta}} {
			if !bytes.Equal(pair[0], pair[1]) || (pair[0] == nil) != (pair[1] == nil) {
				t.Fatalf("%s: read payload %q meta %q, json.Unmarshal %q %q", params, got.Payload, got.Meta, want.Payload, want.Meta)
			}
			if cap(pair[0]) != len(pair[0]) {
				t.Fatalf("%s: %q has room after it (cap %d): an append would write into params", params, pair[0], cap(pair[0]))
			}
		}
	})
}

// FuzzScanProcessMessageResult holds ScanProcessMessageResult to
// json.Unmarshal into ProcessMessageResult: the same fields (retry_seconds
// to the bit) and the same error for the same inputs.
func FuzzScanProcessMessageResult(f *testing.F) {
	for _, seed := range []string{
		`{"processed":true}`, `{"processed":false,"should_retry":true,"retry_seconds":3600}`,
		`{"processed":false,"should_retry":true,"retry_seconds":0,"stopPropagation":false}`,
		`{"reject":true,"message":"no \u00e9","success":true}`, `{"retry_seconds":0.25}`, `{"retry_seconds":1e400}`,
		`{"retry_seconds":-3}`, `{"retry_seconds":123456789012345678}`, `{"retry_seconds":"1"}`, `{"processed":1}`,
		`{"processed":"true","message":7}`, `{"Processed":true,"PROCESSED":null,"stoppropagation":true}`,
		`{"processed":{"a":[1]}}`, `[true]`, `null`, `3`, `{"message":null,"message":"x"}`, `{"retry_seconds":00}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, result []byte) {
		if !json.Valid(result) {
			return
		}
		result = bytes.TrimSpace(result)
		var want ProcessMessageResult
		wantErr := json.Unmarshal(result, &want)
		got, gotErr := ScanProcessMessageResult(result)
		sameTypeError(t, result, gotErr, wantErr)
		if wantErr == nil && got != want {
			t.Fatalf("%s: read %+v, json.Unmarshal %+v", result, got, want)
		}
	})
}

// FuzzScanSendMessageResult holds ScanSendMessageResult to json.Unmarshal
// into SendMessageResult: the same fields and acks, and the same error for
// the same inputs.
func FuzzScanSendMessageResult(f *testing.F) {
	for _, seed := range []string{
		`{"success":true,"messageId":"m-1","acks":[{"client_id":"s","subscription":"t","processed":true,"stopPropagation":false}]}`,
		`{"success":true,"messageId":"m","acks":[{"client_id":"s","subscription":"t","processed":false,"stopPropagation":false,"retrying":true,"attempt":2,"next_attempt":"2026-01-01T00:00:00Z"}]}`,
		`{"success":false,"messageId":"m","acks":[],"reason":"no_subscribers","held":true,"next_attempt":"x"}`,
		`{"acks":null}`, `{"acks":[null,{"held":true,"dead_letter":"d-1","error":"e","message":"\u00e9"}]}`,
		`{"acks":[1]}`, `{"acks":{}}`, `{"acks":[{"attempt":1.5}]}`, `{"acks":[{"processed":"x"}],"success":3}`,
		`{"acks":[{"client_id":"a"},{"client_id":"b"}],"acks":[{"processed":true}],"acks":[null,{"held":true}]}`,
		`{"ACKS":[{"CLIENT_ID":"a"}],"Success":true}`, `[]`, `null`, `{"acks":[ {} , [] ]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, result []byte) {
		if !json.Valid(result) {
			return
		}
		result = bytes.TrimSpace(result)
		var want SendMessageResult
		wantErr := json.Unmarshal(result, &want)
		got, gotErr := ScanSendMessageResult(result)
		sameTypeError(t, result, gotErr, wantErr)
		if wantErr == nil && (fmt.Sprintf("%#v", got) != fmt.Sprintf("%#v", want)) {
			t.Fatalf("%s: read %#v, json.Unmarshal %#v", result, got, want)
		}
	})
}

// A document's strings cost one allocation together: a delivery's four
// are one, a sendMessage result's one besides its acks' array; and they
// stay what json.Unmarshal reads when there are more than the first
// allocation holds (each ack's strings after the text has grown).
func TestScanStringsShareOneAllocation(t *testing.T) {
	delivery := []byte(`{"topic":"bench:t1:abcdefghijkl","subscription":"bench:t1:abcdefghijkl","payload":{"type":"x","text":"` + strings.Repeat("x", 1000) + `"},"messageId":"48aa53b8b658-1277","from":"sdk-p1","attempt":1}`)
	if n := testing.AllocsPerRun(100, func() { _, _ = ScanProcessMessage(delivery) }); n != 1 {
		t.Errorf("ScanProcessMessage: %v allocations, want 1", n)
	}
	result := []byte(`{"success":true,"messageId":"48aa53b8b658-1277","acks":[{"client_id":"sub","subscription":"bench:t1:abcdefghijkl","processed":true,"stopPropagation":false}]}`)
	if n := testing.AllocsPerRun(100, func() { _, _ = ScanSendMessageResult(result) }); n != 2 {
		t.Errorf("ScanSendMessageResult: %v allocations, want 2", n)
	}

	var acks []string
	for i := range 200 {
		acks = append(acks, fmt.Sprintf(`{"client_id":"s%d","subscription":"bench:%d:*","processed":true,"message":"m\u00e9%d","stopPropagation":false}`, i, i, i))
	}
	many := []byte(`{"success":true,"messageId":"m-1","acks":[` + strings.Join(acks, ",") + `]}`)
	var want SendMessageResult
	if err := json.Unmarshal(many, &want); err != nil {
		t.Fatal(err)
	}
	got, err := ScanSendMessageResult(many)
	if err != nil || fmt.Sprintf("%#v", got) != fmt.Sprintf("%#v", want) {
		t.Fatalf("read %#v, %v; json.Unmarshal %#v", got, err, want)
	}
}
