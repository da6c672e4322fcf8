package auth

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
)

// PEM block types of the key files bub auth keygen writes and the
// configuration names.
const (
	pemPublicKey  = "PUBLIC KEY"  // PKIX, RFC 5280
	pemPrivateKey = "PRIVATE KEY" // PKCS #8, RFC 5208
)

// ParsePublicKeyPEM reads an Ed25519 public key from a PEM "PUBLIC KEY"
// block (PKIX), as in an issuer's public_key_file. Anything else in front
// of the block, or a key of another type, is an error: an issuer's key
// that silently turned out to be RSA would verify nothing.
func ParsePublicKeyPEM(data []byte) (ed25519.PublicKey, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("no PEM block found")
	}
	if block.Type != pemPublicKey {
		return nil, fmt.Errorf("PEM block is %q, want %q", block.Type, pemPublicKey)
	}
	key, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse public key: %w", err)
	}
	pub, ok := key.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("public key is %T, want Ed25519", key)
	}
	return pub, nil
}

// ParsePrivateKeyPEM reads an Ed25519 private key from a PEM "PRIVATE
// KEY" block (PKCS #8).
func ParsePrivateKeyPEM(data []byte) (ed25519.PrivateKey, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("no PEM block found")
	}
	if block.Type != pemPrivateKey {
		return nil, fmt.Errorf("PEM block is %q, want %q", block.Type, pemPrivateKey)
	}
	key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse private key: %w", err)
	}
	priv, ok := key.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("private key is %T, want Ed25519", key)
	}
	return priv, nil
}

// LoadPrivateKey reads an issuer's Ed25519 private key from a PEM file
// (PKCS #8 "PRIVATE KEY", as bub auth keygen writes it). The spawner and
// bub auth issue sign tokens with it.
func LoadPrivateKey(path string) (ed25519.PrivateKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read private key: %w", err)
	}
	key, err := ParsePrivateKeyPEM(data)
	if err != nil {
		return nil, fmt.Errorf("private key %s: %w", path, err)
	}
	return key, nil
}

// LoadPublicKey reads an Ed25519 public key from a PEM file (PKIX
// "PUBLIC KEY").
func LoadPublicKey(path string) (ed25519.PublicKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read public key: %w", err)
	}
	key, err := ParsePublicKeyPEM(data)
	if err != nil {
		return nil, fmt.Errorf("public key %s: %w", path, err)
	}
	return key, nil
}

// EncodePrivateKeyPEM returns key as a PEM "PRIVATE KEY" block (PKCS #8),
// the form LoadPrivateKey reads.
func EncodePrivateKeyPEM(key ed25519.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: pemPrivateKey, Bytes: der}), nil
}

// EncodePublicKeyPEM returns key as a PEM "PUBLIC KEY" block (PKIX), the
// form an issuer's public_key_file holds.
func EncodePublicKeyPEM(key ed25519.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode public key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: pemPublicKey, Bytes: der}), nil
}
