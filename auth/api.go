package auth

// SKELETON: signatures agreed between the bus and this package; the
// bodies are being written. Do not change an exported signature without
// updating every caller.

import (
	"crypto/ed25519"
	"errors"
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
	// Rate limits publishes per connection; zero: the bus default.
	Rate Rate `yaml:"rate" json:"rate,omitempty"`
	// MaxPending caps the retries and held messages this identity's
	// publishes may have stored at once; zero: the bus default.
	MaxPending int `yaml:"max_pending" json:"max_pending,omitempty"`
}

// Identity is a static-token identity.
type Identity struct {
	Name        string `yaml:"name"`
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
	// its claims intersected with the ceiling.
	Ceiling Grant `yaml:"ceiling"`
}

// Config is the auth section of bub serve's configuration file.
type Config struct {
	Identities []Identity `yaml:"identities"`
	Issuers    []Issuer   `yaml:"issuers"`
	// Anonymous, when set, is what a connection without a credential
	// may do; when nil such a connection is refused.
	Anonymous *Grant `yaml:"anonymous"`
}

// Errors Authenticate returns; the wrapped detail is for the bus log,
// never for the peer.
var (
	ErrNoCredential  = errors.New("no credential presented")
	ErrBadCredential = errors.New("credential not accepted")
)

// Authenticator checks credentials against one loaded Config. It is
// immutable and safe for concurrent use; a reload builds a new one.
type Authenticator struct { /* compiled config */
}

// New compiles cfg. Key files are read relative to baseDir. Every error
// names the identity or issuer at fault.
func New(cfg Config, baseDir string) (*Authenticator, error) { panic("auth: not yet implemented") }

// Authenticate checks a bearer token ("" when none was presented) and
// returns what it allows. A wrong, expired or unknown token returns an
// error wrapping ErrBadCredential with the reason (for the log); no token
// returns the anonymous principal, or ErrNoCredential when anonymous
// access is not configured. now is the time tokens are checked against.
func (a *Authenticator) Authenticate(token string, now time.Time) (*Principal, error) {
	panic("auth: not yet implemented")
}

// AuthenticateCert returns the identity whose CertSubject is cn.
func (a *Authenticator) AuthenticateCert(cn string) (*Principal, error) {
	panic("auth: not yet implemented")
}

// Principal is an authenticated credential.
type Principal struct { /* name, issuer, grants (all must allow), expiry */
}

// Name is the identity for logs and events: the identity's name,
// "issuer/sub" for a JWT, or "anonymous".
func (p *Principal) Name() string { panic("auth: not yet implemented") }

// Expires is when the credential stops being valid; zero for none.
func (p *Principal) Expires() time.Time { panic("auth: not yet implemented") }

// AllowsClientID reports whether the credential may initialize as id.
// An id with pattern or reserved characters (* ? [ ] { } \) is never
// allowed, so that {{clientId}} cannot widen a rule.
func (p *Principal) AllowsClientID(id string) bool { panic("auth: not yet implemented") }

// Bind compiles the principal's rules for one clientId ({{clientId}}
// replaced). The bus calls it once per initialize.
func (p *Principal) Bind(clientID string) *Access { panic("auth: not yet implemented") }

// Access is a principal's permissions for one connection.
type Access struct { /* compiled */
}

// CanPublish reports whether topic may be published to. A system: topic
// needs an allow pattern that itself starts with "system:";
// protocol.BusOwnedTopic topics are never allowed.
func (a *Access) CanPublish(topic string) bool { panic("auth: not yet implemented") }

// CanSubscribe reports whether p may be subscribed to: every topic it
// could match must be allowed and none denied; when that cannot be
// decided simply, false. The system: rule applies as for CanPublish.
func (a *Access) CanSubscribe(p *protocol.Pattern) bool { panic("auth: not yet implemented") }

func (a *Access) Admin() bool       { panic("auth: not yet implemented") }
func (a *Access) Fallback() bool    { panic("auth: not yet implemented") }
func (a *Access) PublishOnly() bool { panic("auth: not yet implemented") }

// Rate is the publish rate the credential sets; zero: none set.
func (a *Access) Rate() Rate { panic("auth: not yet implemented") }

// MaxPending is the identity's cap on stored retries and holds; zero:
// none set.
func (a *Access) MaxPending() int { panic("auth: not yet implemented") }

// Claims are the bub-specific claims of a JWT, under "bub".
type Claims struct {
	Publish     Rules `json:"publish"`
	Subscribe   Rules `json:"subscribe"`
	Admin       bool  `json:"admin,omitempty"`
	Fallback    bool  `json:"fallback,omitempty"`
	PublishOnly bool  `json:"publish_only,omitempty"`
}

// Mint signs a JWT for clientID (sub) from issuer (iss), valid for ttl
// from now.
func Mint(key ed25519.PrivateKey, issuer, clientID string, claims Claims, ttl time.Duration, now time.Time) (string, error) {
	panic("auth: not yet implemented")
}

// NewToken returns a random 256-bit token (base64url) and its hex
// SHA-256, for a static identity.
func NewToken() (token, sha256hex string, err error) { panic("auth: not yet implemented") }
