package a2a

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// HeaderSignature is the header that signs each push notification, the
// bus's webhook signature: "t=UNIX,v1=HEX", HEX the HMAC-SHA256, keyed
// with the config's token, of UNIX, a '.', and the body.
const HeaderSignature = "Bub-Signature"

// VerifyPush checks a push notification as its receiver got it: that
// header's Bub-Signature is the HMAC of body under token (the token of
// the push notification config), and that it was signed within maxAge
// of now, so that a captured request cannot be replayed later. A
// receiver calls it before it trusts the body (docs/A2A.md, "Push
// notifications").
func VerifyPush(token string, header http.Header, body []byte, now time.Time, maxAge time.Duration) error {
	if token == "" {
		return errors.New("no token: a config without one gets notifications signed with a key it cannot know")
	}
	t, sig, err := parseSignature(header.Get(HeaderSignature))
	if err != nil {
		return err
	}
	if age := now.Sub(time.Unix(t, 0)); age > maxAge || age < -maxAge {
		return fmt.Errorf("%s: signed at %s, %s from now, more than %s", HeaderSignature, time.Unix(t, 0).UTC().Format(time.RFC3339), age.Round(time.Second), maxAge)
	}
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte(strconv.FormatInt(t, 10) + "."))
	m.Write(body)
	if !hmac.Equal(m.Sum(nil), sig) {
		return fmt.Errorf("%s does not verify: the body was changed, or signed with another token", HeaderSignature)
	}
	return nil
}

// parseSignature reads "t=UNIX,v1=HEX" in either order; other fields
// are skipped, so that a later scheme can sign beside v1.
func parseSignature(h string) (t int64, sig []byte, err error) {
	if h == "" {
		return 0, nil, fmt.Errorf("no %s header", HeaderSignature)
	}
	seenT := false
	for field := range strings.SplitSeq(h, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(field), "=")
		switch k {
		case "t":
			if t, err = strconv.ParseInt(v, 10, 64); err != nil || t <= 0 {
				return 0, nil, fmt.Errorf("%s: t=%q is not a Unix time", HeaderSignature, v)
			}
			seenT = true
		case "v1":
			if sig, err = hex.DecodeString(v); err != nil || len(sig) != sha256.Size {
				return 0, nil, fmt.Errorf("%s: v1 is not %d hex bytes", HeaderSignature, sha256.Size)
			}
		}
	}
	if !seenT || sig == nil {
		return 0, nil, fmt.Errorf("%s %q: want t=UNIX,v1=HEX", HeaderSignature, h)
	}
	return t, sig, nil
}
