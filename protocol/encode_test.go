package protocol

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzAppendSendMessageResult holds SendMessageResult.AppendJSON to
// json.Marshal: whatever result json.Unmarshal makes of the input, the two
// encode it to the same bytes.
func FuzzAppendSendMessageResult(f *testing.F) {
	for _, seed := range []string{
		`{"success":true,"messageId":"m-1","acks":[{"client_id":"s","subscription":"t","processed":true,"stopPropagation":false}]}`,
		`{"success":true,"messageId":"m","acks":[{"client_id":"s","subscription":"t:*","processed":false,"stopPropagation":true,"message":"done","retrying":true,"attempt":2,"next_attempt":"2026-01-01T00:00:00Z"}]}`,
		`{"success":false,"messageId":"m","acks":[],"reason":"no_subscribers","held":true,"next_attempt":"x"}`,
		`{"acks":null}`, `{"acks":[null,{"held":true,"dead_letter":"d-1","error":"e","message":"\u00e9"}]}`,
		`{"messageId":"<a&b>","acks":[{"client_id":"\u2028\"\\\u0001","attempt":-3,"error":"x\ud800y"}]}`,
		`{"acks":[{"message":"caf\u00e9 \ud83d\ude00","subscription":"a\u0000b"}]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var r SendMessageResult
		if json.Unmarshal(data, &r) != nil {
			return
		}
		want, err := json.Marshal(&r)
		if err != nil {
			t.Fatalf("json.Marshal %#v: %v", r, err)
		}
		if got := r.AppendJSON([]byte("prefix")); !bytes.Equal(got, append([]byte("prefix"), want...)) {
			t.Fatalf("AppendJSON %#v:\n%s\njson.Marshal:\n%s", r, got, want)
		}
	})
}
