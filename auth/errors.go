package auth

import "errors"

// Errors Authenticate and AuthenticateCert return. The wrapped detail
// (which issuer, expired or not yet valid, a bad signature) is for the
// bus log, never for the peer: telling a prober why its token failed
// helps it forge the next one.
var (
	// ErrNoCredential: no credential was presented and the configuration
	// grants anonymous connections nothing.
	ErrNoCredential = errors.New("no credential presented")
	// ErrBadCredential: a credential was presented and is not accepted.
	ErrBadCredential = errors.New("credential not accepted")
)
