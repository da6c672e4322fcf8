package a2a

import (
	"bytes"
	"encoding/json"
	"testing"
)

// Proto field names become JSON names; Struct values stay the client's.
func TestProtoNames(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"id":"t","historyLength":2}`, `{"id":"t","historyLength":2}`},
		{`{"id":"t","history_length":2}`, `{"historyLength":2,"id":"t"}`},
		{`{"history_length":1,"historyLength":2}`, `{"historyLength":2}`},
		{`{"context_id":"c","page_size":5,"status_timestamp_after":"2026-01-01T00:00:00Z"}`, `{"contextId":"c","pageSize":5,"statusTimestampAfter":"2026-01-01T00:00:00Z"}`},
		{`{"message":{"message_id":"m","parts":[{"text":"a_b","data":{"x_y":1},"media_type":"text/plain"}],"metadata":{"k_v":12345678901234567890}}}`,
			`{"message":{"messageId":"m","metadata":{"k_v":12345678901234567890},"parts":[{"data":{"x_y":1},"mediaType":"text/plain","text":"a_b"}]}}`},
		{`{"a_":1`, `{"a_":1`},
	} {
		if got := protoNames(json.RawMessage(tc.in)); string(got) != tc.want {
			t.Errorf("protoNames(%s)\n got %s\nwant %s", tc.in, got, tc.want)
		}
	}
}

// FuzzProtoNames: JSON in is JSON out, and params without an
// underscore come back as they were.
func FuzzProtoNames(f *testing.F) {
	for _, s := range []string{`{"history_length":1}`, `{"a":[{"b_c":{"metadata":{"d_e":1}}}]}`, `[1,"_"]`, `{`, `"_"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out := protoNames(in)
		if json.Valid(in) && !json.Valid(out) {
			t.Fatalf("%s became %s", in, out)
		}
		if bytes.IndexByte(in, '_') < 0 && !bytes.Equal(in, out) {
			t.Fatalf("%s changed to %s", in, out)
		}
	})
}
