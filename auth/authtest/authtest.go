// Package authtest gives tests the credentials a bus with auth needs:
// token hashes for static identities and issuer key pairs on disk.
package authtest

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"github.com/bub-bus/bub/auth"
)

// SHA256 is token's hex SHA-256, an identity's token_sha256.
func SHA256(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}

// Issuer makes an Ed25519 key pair, writes the public key to dir/file
// (an issuer's public_key_file) and returns the private key.
func Issuer(t testing.TB, dir, file string) ed25519.PrivateKey {
	t.Helper()
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pem, err := auth.EncodePublicKeyPEM(pub)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, file), pem, 0o644); err != nil {
		t.Fatal(err)
	}
	return key
}
