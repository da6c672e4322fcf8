package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"
)

// tokenBytes is the entropy of a static token: 256 bits, beyond guessing
// and beyond a precomputed table of hashes.
const tokenBytes = 32

// NewToken returns a random 256-bit token (base64url) and its hex
// SHA-256, for a static identity.
func NewToken() (token, sha256hex string, err error) {
	b := make([]byte, tokenBytes)
	if _, err := rand.Read(b); err != nil {
		return "", "", fmt.Errorf("new token: read random bytes: %w", err)
	}
	token = base64.RawURLEncoding.EncodeToString(b)
	sum := sha256.Sum256([]byte(token))
	return token, hex.EncodeToString(sum[:]), nil
}

// staticIdentity is a compiled Identity with a token.
type staticIdentity struct {
	hash      [32]byte
	principal *Principal
}

// lookupToken returns the identity whose hash is token's, comparing with
// every identity in constant time so that the time taken says nothing
// about how close a guess came, nor which identity matched.
func lookupToken(ids []staticIdentity, token string) *Principal {
	sum := sha256.Sum256([]byte(token))
	var found *Principal
	for i := range ids {
		if subtle.ConstantTimeCompare(sum[:], ids[i].hash[:]) == 1 {
			found = ids[i].principal
		}
	}
	return found
}

// looksLikeJWT reports whether token has the shape of a compact JWS:
// three base64url parts separated by dots, the first two non-empty (the
// signature may be empty, as in alg "none", so that such a token is
// refused as a JWT with that reason). NewToken's tokens never have a
// dot, so the shapes do not collide.
func looksLikeJWT(token string) bool {
	parts := strings.Split(token, ".")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" {
		return false
	}
	for _, part := range parts {
		for i := 0; i < len(part); i++ {
			c := part[i]
			if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}
