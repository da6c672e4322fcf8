package auth

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/bub-bus/bub/protocol"
)

// Rules are allow and deny lists of topic patterns. Deny wins. A pattern
// may contain {{clientId}}, replaced by the connection's clientId.
type Rules struct {
	Allow []string `yaml:"allow" json:"allow,omitempty"`
	Deny  []string `yaml:"deny" json:"deny,omitempty"`
}

// Rate is a token bucket for publishes: PerSecond sustained, Burst at
// once. The zero value means no limit.
type Rate struct {
	PerSecond float64 `yaml:"per_second" json:"per_second,omitempty"`
	Burst     int     `yaml:"burst" json:"burst,omitempty"`
}

// Grant is what a credential allows.
type Grant struct {
	// ClientIDs are the clientIds (exact, or patterns such as agent-*)
	// a connection with this grant may initialize as.
	ClientIDs   []string `yaml:"client_ids" json:"client_ids,omitempty"`
	Publish     Rules    `yaml:"publish" json:"publish"`
	Subscribe   Rules    `yaml:"subscribe" json:"subscribe"`
	Admin       bool     `yaml:"admin" json:"admin,omitempty"`
	Fallback    bool     `yaml:"fallback" json:"fallback,omitempty"`
	PublishOnly bool     `yaml:"publish_only" json:"publish_only,omitempty"`
	// Durable lets the credential hold durable subscriptions, which
	// outlive its connections (docs/PROTOCOL.md, "Durable
	// subscriptions"); Waker lets it register as the waker of a clientId
	// that holds them (subscriptions.setWaker), as the spawner does for
	// its agents.
	Durable bool `yaml:"durable" json:"durable,omitempty"`
	Waker   bool `yaml:"waker" json:"waker,omitempty"`
	// Rate limits the identity's publishes, across its connections and
	// HTTP publishers (one token bucket); zero: the bus default.
	Rate Rate `yaml:"rate" json:"rate,omitempty"`
	// MaxPending caps the retries and held messages this identity's
	// publishes may have stored at once; zero: the bus default.
	MaxPending int `yaml:"max_pending" json:"max_pending,omitempty"`
	// MaxConnections caps the WebSocket connections this identity holds
	// at once, across its clientIds and addresses; zero: the bus's
	// max_connections_per_identity.
	MaxConnections int `yaml:"max_connections" json:"max_connections,omitempty"`
}

// Identity is a static-token identity.
type Identity struct {
	Name string `yaml:"name"`
	// TokenSHA256 is the hex SHA-256 of the token (bub auth token prints
	// both); the token itself is never configured. It may be empty when
	// CertSubject is set.
	TokenSHA256 string `yaml:"token_sha256"`
	// CertSubject, when set, lets a TLS client certificate whose subject
	// common name equals it act as this identity (mutual TLS).
	CertSubject string `yaml:"cert_subject"`
	Grant       `yaml:",inline"`
}

// Issuer is a signer of JWTs (EdDSA/Ed25519).
type Issuer struct {
	Name string `yaml:"name"`
	// PublicKeyFile is a PEM file (PKIX "PUBLIC KEY"), relative to the
	// configuration file's directory.
	PublicKeyFile string `yaml:"public_key_file"`
	// ClientIDs bounds the sub claims (clientIds) it may issue for.
	ClientIDs []string `yaml:"client_ids"`
	// Ceiling bounds what its tokens may grant: a token's permissions are
	// its claims intersected with the ceiling. Its Rate and MaxPending
	// apply to every token the issuer signs; its ClientIDs are unused
	// (the issuer's own ClientIDs bound the sub claim).
	Ceiling Grant `yaml:"ceiling"`
}

// Config is the auth section of bub serve's configuration file.
type Config struct {
	Identities []Identity `yaml:"identities"`
	Issuers    []Issuer   `yaml:"issuers"`
	// Anonymous, when set, is what a connection without a credential
	// may do; when nil such a connection is refused.
	Anonymous *Grant `yaml:"anonymous"`
	// MaxTokenLifetime refuses a JWT whose exp is further than this from
	// its iat (from the time of the check when it has no iat, or one
	// later than that): a leaked token is good for no longer than this,
	// whatever its issuer signed. It is not read from the auth: section;
	// bub serve sets it from --max-token-lifetime. Zero:
	// DefaultMaxTokenLifetime.
	MaxTokenLifetime time.Duration `yaml:"-"`
}

// DefaultMaxTokenLifetime is Config.MaxTokenLifetime's default: thirty
// days, far beyond the day the spawner and bub auth issue mint for, and
// short of a credential that outlives its owner's interest in it.
const DefaultMaxTokenLifetime = 30 * 24 * time.Hour

// clientIDVar is the placeholder a rule pattern may hold for the
// connection's clientId.
const clientIDVar = "{{clientId}}"

// placeholderClientID stands in for the clientId when a rule is checked
// at load time; any id without pattern characters would do.
const placeholderClientID = "x"

// anonymousName is the principal name of a connection without a
// credential; no identity may take it, so logs stay unambiguous.
const anonymousName = "anonymous"

// checkName refuses names that would make a log line ambiguous: empty,
// "anonymous", or with a '/' (which separates issuer and sub in a JWT
// principal's name).
func checkName(name string) error {
	switch {
	case name == "":
		return errors.New("name is required")
	case name == anonymousName:
		return fmt.Errorf("name %q is reserved for connections without a credential", name)
	case strings.ContainsRune(name, '/'):
		return fmt.Errorf("name %q has a '/', which separates issuer and subject in logs", name)
	}
	return nil
}

// parseTokenHash decodes a token_sha256 value: 64 hex digits.
func parseTokenHash(s string) ([32]byte, error) {
	var h [32]byte
	if len(s) != 2*len(h) {
		return h, fmt.Errorf("token_sha256 is %d characters, want 64 hex digits (bub auth token prints it)", len(s))
	}
	if _, err := hex.Decode(h[:], []byte(s)); err != nil {
		return h, fmt.Errorf("token_sha256 %q is not hex: %w", s, err)
	}
	return h, nil
}

// parseClientIDs compiles client_ids patterns. {{clientId}} has no
// meaning there (it would be the id matching itself), so it is refused.
func parseClientIDs(ids []string) ([]*protocol.Pattern, error) {
	out := make([]*protocol.Pattern, 0, len(ids))
	for _, id := range ids {
		if strings.Contains(id, clientIDVar) {
			return nil, fmt.Errorf("client_ids pattern %q: %s is allowed only in publish and subscribe rules", id, clientIDVar)
		}
		p, err := protocol.ParsePattern(id)
		if err != nil {
			return nil, fmt.Errorf("client_ids: %w", err)
		}
		out = append(out, p)
	}
	return out, nil
}

// checkRate refuses a negative, NaN or infinite rate, a negative burst
// and a negative max_pending: golang.org/x/time/rate reads such values as
// "refuse everything" or "allow everything" depending on the field, and
// neither is what an operator who wrote them meant.
func checkRate(g *Grant) error {
	if g.Rate.PerSecond < 0 || math.IsNaN(g.Rate.PerSecond) || math.IsInf(g.Rate.PerSecond, 0) || g.Rate.Burst < 0 {
		return fmt.Errorf("rate %+v is negative", g.Rate)
	}
	if g.MaxPending < 0 {
		return fmt.Errorf("max_pending %d is negative", g.MaxPending)
	}
	if g.MaxConnections < 0 {
		return fmt.Errorf("max_connections %d is negative", g.MaxConnections)
	}
	return nil
}
