package auth

import (
	"fmt"
	"path/filepath"
	"time"
)

// Authenticator checks credentials against one loaded Config. It is
// immutable and safe for concurrent use; a reload builds a new one.
type Authenticator struct {
	identities []staticIdentity
	// bySubject holds the identities with a cert_subject.
	bySubject map[string]*Principal
	issuers   map[string]*jwtIssuer
	// anonymous is nil when connections without a credential are
	// refused.
	anonymous *Principal
	// maxLifetime is Config.MaxTokenLifetime, its default applied.
	maxLifetime time.Duration
}

// New compiles cfg. Key files are read relative to baseDir. Every error
// names the identity or issuer at fault.
//
// It checks that names are present and unique (and not "anonymous"),
// that each token_sha256 is 64 hex digits used by one identity only,
// that each identity has a token or a cert_subject, that client_ids are
// given and valid, that every rule pattern compiles once {{clientId}} is
// replaced, that each issuer's public key is an Ed25519 PEM key, and
// that MaxTokenLifetime is not negative.
func New(cfg Config, baseDir string) (*Authenticator, error) {
	a := &Authenticator{bySubject: map[string]*Principal{}, issuers: map[string]*jwtIssuer{}, maxLifetime: cfg.MaxTokenLifetime}
	switch {
	case a.maxLifetime < 0:
		return nil, fmt.Errorf("auth: maximum token lifetime %s is negative", a.maxLifetime)
	case a.maxLifetime == 0:
		a.maxLifetime = DefaultMaxTokenLifetime
	}
	names := map[string]bool{}
	hashes := map[[32]byte]string{}
	for i := range cfg.Identities {
		id := &cfg.Identities[i]
		where := fmt.Sprintf("auth: identity %d (%q)", i+1, id.Name)
		p, err := compileIdentity(id)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		if names[id.Name] {
			return nil, fmt.Errorf("%s: name used by another identity", where)
		}
		names[id.Name] = true
		if id.TokenSHA256 != "" {
			h, err := parseTokenHash(id.TokenSHA256)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", where, err)
			}
			if other, dup := hashes[h]; dup {
				return nil, fmt.Errorf("%s: token_sha256 is also identity %q's; each identity needs its own token", where, other)
			}
			hashes[h] = id.Name
			a.identities = append(a.identities, staticIdentity{hash: h, principal: p})
		}
		if id.CertSubject != "" {
			if _, dup := a.bySubject[id.CertSubject]; dup {
				return nil, fmt.Errorf("%s: cert_subject %q is also another identity's", where, id.CertSubject)
			}
			a.bySubject[id.CertSubject] = p
		}
	}
	for i := range cfg.Issuers {
		iss := &cfg.Issuers[i]
		ji, err := compileIssuer(iss, baseDir)
		if err != nil {
			return nil, fmt.Errorf("auth: issuer %d (%q): %w", i+1, iss.Name, err)
		}
		if a.issuers[iss.Name] != nil {
			return nil, fmt.Errorf("auth: issuer %d (%q): name used by another issuer", i+1, iss.Name)
		}
		a.issuers[iss.Name] = ji
	}
	if cfg.Anonymous != nil {
		p, err := compilePrincipal(anonymousName, cfg.Anonymous)
		if err != nil {
			return nil, fmt.Errorf("auth: anonymous: %w", err)
		}
		a.anonymous = p
	}
	return a, nil
}

func compileIdentity(id *Identity) (*Principal, error) {
	if err := checkName(id.Name); err != nil {
		return nil, err
	}
	if id.TokenSHA256 == "" && id.CertSubject == "" {
		return nil, fmt.Errorf("neither token_sha256 nor cert_subject is set, so nothing can authenticate as it")
	}
	if len(id.ClientIDs) == 0 {
		return nil, fmt.Errorf("client_ids is empty, so it could initialize as no clientId")
	}
	return compilePrincipal(id.Name, &id.Grant)
}

// compilePrincipal builds the principal of a static identity or of
// anonymous access: one grant, its client_ids, its limits.
func compilePrincipal(name string, g *Grant) (*Principal, error) {
	ids, err := parseClientIDs(g.ClientIDs)
	if err != nil {
		return nil, err
	}
	if err := checkRate(g); err != nil {
		return nil, err
	}
	cg, err := compileGrant(g.Publish, g.Subscribe, g.Admin, g.Fallback, g.PublishOnly)
	if err != nil {
		return nil, err
	}
	cg.durable, cg.waker = g.Durable, g.Waker
	return &Principal{name: name, clientIDs: ids, grants: []*grant{cg}, rate: g.Rate, maxPending: g.MaxPending, maxConnections: g.MaxConnections}, nil
}

func compileIssuer(iss *Issuer, baseDir string) (*jwtIssuer, error) {
	if err := checkName(iss.Name); err != nil {
		return nil, err
	}
	if len(iss.ClientIDs) == 0 {
		return nil, fmt.Errorf("client_ids is empty, so it could issue for no clientId")
	}
	ids, err := parseClientIDs(iss.ClientIDs)
	if err != nil {
		return nil, err
	}
	if err := checkRate(&iss.Ceiling); err != nil {
		return nil, fmt.Errorf("ceiling: %w", err)
	}
	ceiling, err := compileGrant(iss.Ceiling.Publish, iss.Ceiling.Subscribe, iss.Ceiling.Admin, iss.Ceiling.Fallback, iss.Ceiling.PublishOnly)
	if err != nil {
		return nil, fmt.Errorf("ceiling: %w", err)
	}
	ceiling.durable, ceiling.waker = iss.Ceiling.Durable, iss.Ceiling.Waker
	if iss.PublicKeyFile == "" {
		return nil, fmt.Errorf("public_key_file is required")
	}
	path := iss.PublicKeyFile
	if !filepath.IsAbs(path) {
		path = filepath.Join(baseDir, path)
	}
	key, err := LoadPublicKey(path)
	if err != nil {
		return nil, err
	}
	return &jwtIssuer{name: iss.Name, key: key, clientIDs: ids, ceiling: ceiling, rate: iss.Ceiling.Rate, pending: iss.Ceiling.MaxPending, connections: iss.Ceiling.MaxConnections}, nil
}

// Authenticate checks a bearer token ("" when none was presented) and
// returns what it allows. A wrong, expired or unknown token returns an
// error wrapping ErrBadCredential with the reason (for the log); no token
// returns the anonymous principal, or ErrNoCredential when anonymous
// access is not configured. now is the time tokens are checked against.
//
// A token shaped as a JWT (three dot-separated base64url parts) is
// checked as one; any other is looked up among the static identities.
// Neither the error nor anything else here contains the token.
func (a *Authenticator) Authenticate(token string, now time.Time) (*Principal, error) {
	switch {
	case token == "":
		if a.anonymous == nil {
			return nil, ErrNoCredential
		}
		return a.anonymous, nil
	case looksLikeJWT(token):
		return a.authenticateJWT(token, now)
	}
	if p := lookupToken(a.identities, token); p != nil {
		return p, nil
	}
	return nil, fmt.Errorf("%w: static token matches no identity", ErrBadCredential)
}

// AuthenticateCert returns the identity whose CertSubject is cn.
//
// The caller has verified the certificate chain against the configured
// client CA; cn is its subject's common name. An empty cn never matches.
func (a *Authenticator) AuthenticateCert(cn string) (*Principal, error) {
	if p := a.bySubject[cn]; cn != "" && p != nil {
		return p, nil
	}
	return nil, fmt.Errorf("%w: client certificate subject %q matches no identity's cert_subject", ErrBadCredential, clip(cn))
}
