package auth

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/bub-bus/bub/protocol"
)

// Claims are the bub-specific claims of a JWT, under "bub".
//
// They carry no clientIds (the sub claim is the one clientId a token may
// initialize as) and no rate or max_pending (the issuer's ceiling sets
// those). Patterns may hold {{clientId}}, replaced by the sub.
type Claims struct {
	Publish     Rules `json:"publish"`
	Subscribe   Rules `json:"subscribe"`
	Admin       bool  `json:"admin,omitempty"`
	Fallback    bool  `json:"fallback,omitempty"`
	PublishOnly bool  `json:"publish_only,omitempty"`
	Durable     bool  `json:"durable,omitempty"`
	Waker       bool  `json:"waker,omitempty"`
}

// tokenClaims is the whole claim set of a bub JWT.
type tokenClaims struct {
	jwt.RegisteredClaims
	Bub Claims `json:"bub"`
}

// signingMethod is the only algorithm signed or accepted. Naming it on
// both sides (rather than trusting the token's alg header) is what
// refuses "none" and an HS256 token whose HMAC key is the issuer's
// public key.
var signingMethod = jwt.SigningMethodEdDSA

// Mint signs a JWT for clientID (sub) from issuer (iss), valid for ttl
// from now.
//
// It sets iat and nbf to now and exp to now+ttl (the bus requires exp).
// The claims' patterns are checked first, so that a bad permission
// template fails where the token is made rather than when the agent
// connects.
func Mint(key ed25519.PrivateKey, issuer, clientID string, claims Claims, ttl time.Duration, now time.Time) (string, error) {
	switch {
	case len(key) != ed25519.PrivateKeySize:
		return "", fmt.Errorf("mint token for %q: private key is %d bytes, want %d", clientID, len(key), ed25519.PrivateKeySize)
	case issuer == "":
		return "", fmt.Errorf("mint token for %q: issuer is required", clientID)
	case !plainClientID(clientID):
		return "", fmt.Errorf("mint token: clientId %q is empty or has one of %s", clientID, notInClientID)
	case ttl <= 0:
		return "", fmt.Errorf("mint token for %q: ttl %s is not positive", clientID, ttl)
	}
	if _, err := compileGrant(claims.Publish, claims.Subscribe, false, false, false); err != nil {
		return "", fmt.Errorf("mint token for %q: %w", clientID, err)
	}
	tc := tokenClaims{
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer:    issuer,
			Subject:   clientID,
			IssuedAt:  jwt.NewNumericDate(now),
			NotBefore: jwt.NewNumericDate(now),
			ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
		},
		Bub: claims,
	}
	s, err := jwt.NewWithClaims(signingMethod, tc).SignedString(key)
	if err != nil {
		return "", fmt.Errorf("mint token for %q: sign: %w", clientID, err)
	}
	return s, nil
}

// jwtIssuer is a compiled Issuer.
type jwtIssuer struct {
	name      string
	key       ed25519.PublicKey
	clientIDs []*protocol.Pattern
	ceiling   *grant
	rate      Rate
	pending   int
	// connections is the ceiling's MaxConnections.
	connections int
}

// ClockSkew is the clock skew tolerated on exp, nbf and iat: the spawner
// mints a token and an agent presents it at once, often to a bus on
// another host whose clock is a few seconds off, and a token refused for
// being issued two seconds "in the future" is an outage nobody can see
// the cause of. Thirty seconds covers an unsynchronised clock's usual
// drift while keeping an expired token's grace short.
const ClockSkew = 30 * time.Second

// authenticateJWT verifies a JWT and builds its principal. Every error
// wraps ErrBadCredential and says why, for the bus log.
func (a *Authenticator) authenticateJWT(token string, now time.Time) (*Principal, error) {
	var iss *jwtIssuer
	parser := jwt.NewParser(
		jwt.WithValidMethods([]string{signingMethod.Alg()}),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithTimeFunc(func() time.Time { return now }),
		jwt.WithLeeway(ClockSkew),
	)
	var tc tokenClaims
	_, err := parser.ParseWithClaims(token, &tc, func(t *jwt.Token) (any, error) {
		// The key is chosen by the unverified iss; the signature check
		// that follows is what makes the choice trustworthy.
		iss = a.issuers[tc.Issuer]
		if iss == nil {
			return nil, fmt.Errorf("unknown issuer %q", tc.Issuer)
		}
		return iss.key, nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w: jwt (iss %q, sub %q): %s", ErrBadCredential, clip(tc.Issuer), clip(tc.Subject), jwtReason(err))
	}
	if lifetime := tokenLifetime(&tc, now); lifetime > a.maxLifetime {
		return nil, fmt.Errorf("%w: jwt from issuer %q for %q: valid for %s (exp %s), longer than the maximum token lifetime %s", ErrBadCredential, iss.name, clip(tc.Subject), lifetime, tc.ExpiresAt.UTC().Format(time.RFC3339), a.maxLifetime)
	}
	sub := tc.Subject
	if !plainClientID(sub) {
		return nil, fmt.Errorf("%w: jwt from issuer %q: sub %q is empty or has one of %s", ErrBadCredential, iss.name, sub, notInClientID)
	}
	allowed := false
	for _, p := range iss.clientIDs {
		allowed = allowed || p.Match(sub)
	}
	if !allowed {
		return nil, fmt.Errorf("%w: jwt from issuer %q: sub %q is not among the issuer's client_ids", ErrBadCredential, iss.name, sub)
	}
	claims, err := compileGrant(tc.Bub.Publish, tc.Bub.Subscribe, tc.Bub.Admin, tc.Bub.Fallback, tc.Bub.PublishOnly)
	if err != nil {
		return nil, fmt.Errorf("%w: jwt from issuer %q for %q: bub claims: %w", ErrBadCredential, iss.name, sub, err)
	}
	claims.durable, claims.waker = tc.Bub.Durable, tc.Bub.Waker
	exact, err := protocol.ParsePattern(sub)
	if err != nil || exact.Kind() != protocol.Exact {
		// An id ending in ':' or '-' parses as a prefix, which would let
		// the token initialize as every id that starts with it.
		return nil, fmt.Errorf("%w: jwt from issuer %q: sub %q is not an exact clientId", ErrBadCredential, iss.name, sub)
	}
	var expires time.Time
	if tc.ExpiresAt != nil {
		expires = tc.ExpiresAt.Time
	}
	return &Principal{
		name:       iss.name + "/" + sub,
		expires:    expires,
		clientIDs:  []*protocol.Pattern{exact},
		grants:     []*grant{claims, iss.ceiling},
		rate:       iss.rate,
		maxPending: iss.pending,
		// The ceiling's cap holds for each token's identity
		// (issuer/sub), as its rate and max_pending do.
		maxConnections: iss.connections,
	}, nil
}

// tokenLifetime is how long a verified token says it is valid: from its
// iat to its exp, or from now when it has no iat or one later than now
// (within the skew allowance), so that a token cannot shorten its
// lifetime by claiming a later issue. The parser required exp.
func tokenLifetime(tc *tokenClaims, now time.Time) time.Duration {
	from := now
	if tc.IssuedAt != nil && tc.IssuedAt.Before(now) {
		from = tc.IssuedAt.Time
	}
	return tc.ExpiresAt.Sub(from)
}

// jwtReason names why a JWT was refused, in words an operator reading the
// log can act on, followed by the library's detail.
func jwtReason(err error) string {
	reason := "malformed"
	switch {
	case errors.Is(err, jwt.ErrTokenExpired):
		reason = "expired"
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		reason = "not yet valid"
	case errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		reason = "issued in the future"
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		reason = "a required claim is missing"
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		reason = "bad signature or algorithm"
	case errors.Is(err, jwt.ErrTokenUnverifiable):
		reason = "unverifiable"
	}
	return reason + ": " + err.Error()
}

// clip shortens an unverified claim before it reaches the log, so that a
// prober cannot fill the log with one header's worth of text.
func clip(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}
