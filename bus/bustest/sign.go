package bustest

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
)

// HMACHex is the hex HMAC-SHA256 of data under secret: what a webhook
// sender signs a body with, and what a webhook receiver checks the
// bus's Bub-Signature against.
func HMACHex(secret, data string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(data))
	return hex.EncodeToString(m.Sum(nil))
}
