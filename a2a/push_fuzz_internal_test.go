package a2a

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	spec "github.com/a2aproject/a2a-go/v2/a2a"
)

// FuzzVerifyPush: a receiver's check of Bub-Signature never panics on
// what arrives, names the header when it refuses one, and accepts the
// signature the bus makes over the body.
func FuzzVerifyPush(f *testing.F) {
	for _, s := range []string{"", "t=1", "v1=00", "t=1,v1=zz", "t=-5,v1=", "t=1764100000,v1=" + strings.Repeat("ab", 32), ",,,", "t=1,t=2,v1=x"} {
		f.Add(s, []byte(`{"task":{}}`))
	}
	now := time.Unix(1764100000, 0)
	f.Fuzz(func(t *testing.T, sig string, body []byte) {
		h := http.Header{}
		h.Set(HeaderSignature, sig)
		if err := VerifyPush("tok", h, body, now, time.Minute); err == nil {
			t.Fatalf("signature %q verified over a body it was not made for", sig)
		} else if !strings.Contains(err.Error(), HeaderSignature) {
			t.Fatalf("error %q does not name the header", err)
		}
		m := hmac.New(sha256.New, []byte("tok"))
		m.Write([]byte(strconv.FormatInt(now.Unix(), 10) + "."))
		m.Write(body)
		h.Set(HeaderSignature, "t="+strconv.FormatInt(now.Unix(), 10)+",v1="+hex.EncodeToString(m.Sum(nil)))
		if err := VerifyPush("tok", h, body, now, time.Minute); err != nil {
			t.Fatalf("the bus's own signature: %v", err)
		}
	})
}

// FuzzPushConfig: CreateTaskPushNotificationConfig's params, however
// made, are decoded and checked without a panic, and a refusal names
// the field.
func FuzzPushConfig(f *testing.F) {
	for _, s := range []string{
		`{"taskId":"t","url":"https://example.com/hook","token":"x"}`,
		`{"taskId":"t","url":"ftp://x"}`, `{"taskId":"t","url":"http://u:p@x/"}`,
		`{"taskId":"t","url":"https://x","authentication":{"scheme":""}}`, `{"url":3}`, `null`, `{}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var pc spec.PushConfig
		if err := decodeParams(raw, &pc); err != nil {
			return
		}
		if err := checkPushConfig(&pc, "params"); err != nil && !strings.Contains(err.Error(), "params.") {
			t.Fatalf("error %q names no field", err)
		}
	})
}
