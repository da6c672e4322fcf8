package auth

import (
	"strings"
	"time"

	"github.com/bub-bus/bub/protocol"
)

// Principal is an authenticated credential. It is immutable and safe for
// concurrent use.
type Principal struct {
	name    string
	expires time.Time
	// clientIDs are the clientIds it may initialize as; for a JWT, its
	// sub alone.
	clientIDs []*protocol.Pattern
	// grants must all allow: one for a static identity or anonymous,
	// the claims and the ceiling for a JWT.
	grants     []*grant
	rate       Rate
	maxPending int
	// maxConnections is its grant's MaxConnections; zero: the bus's.
	maxConnections int
}

// Name is the identity for logs and events: the identity's name,
// "issuer/sub" for a JWT, or "anonymous".
func (p *Principal) Name() string { return p.name }

// Expires is when the credential stops being valid; zero for none.
func (p *Principal) Expires() time.Time { return p.expires }

// notInClientID are the characters a clientId may not have to be
// allowed: the pattern and reserved characters of topics. With them an
// id could turn "agent:{{clientId}}" into a pattern matching other
// agents' topics.
const notInClientID = "*?[]{}\\"

// plainClientID reports whether id could be substituted into a rule
// without adding pattern syntax.
func plainClientID(id string) bool {
	return id != "" && !strings.ContainsAny(id, notInClientID)
}

// AllowsClientID reports whether the credential may initialize as id.
// An id with pattern or reserved characters (* ? [ ] { } \) is never
// allowed, so that {{clientId}} cannot widen a rule.
func (p *Principal) AllowsClientID(id string) bool {
	if p == nil || !plainClientID(id) {
		return false
	}
	for _, pat := range p.clientIDs {
		if pat.Match(id) {
			return true
		}
	}
	return false
}

// MaxConnections is the cap on the WebSocket connections the
// credential may hold at once; zero: the bus's.
func (p *Principal) MaxConnections() int { return p.maxConnections }

// ClientIDs are the clientIds, exact or patterns, the credential may
// initialize as, for a refusal to name to its holder.
func (p *Principal) ClientIDs() []string {
	ids := make([]string, len(p.clientIDs))
	for i, pat := range p.clientIDs {
		ids[i] = pat.String()
	}
	return ids
}

// Bind compiles the principal's rules for one clientId ({{clientId}}
// replaced). The bus calls it once per initialize.
//
// A rule that cannot be compiled for clientID fails closed: an allow
// pattern then allows nothing, and a deny pattern denies everything.
// That happens when the id has pattern characters (AllowsClientID
// refuses it first), when the result is not a valid pattern, and when
// the id changes the pattern's kind (an id ending in ':' or '-' would
// turn the exact "agent:{{clientId}}" into a prefix).
func (p *Principal) Bind(clientID string) *Access {
	if p == nil {
		return &Access{publishOnly: true}
	}
	a := &Access{
		admin:      len(p.grants) > 0,
		fallback:   len(p.grants) > 0,
		durable:    len(p.grants) > 0,
		waker:      len(p.grants) > 0,
		rate:       p.rate,
		maxPending: p.maxPending,
	}
	for _, g := range p.grants {
		a.publish = append(a.publish, g.publish.bind(clientID))
		a.subscribe = append(a.subscribe, g.subscribe.bind(clientID))
		a.admin = a.admin && g.admin
		a.fallback = a.fallback && g.fallback
		a.durable = a.durable && g.durable
		a.waker = a.waker && g.waker
		a.publishOnly = a.publishOnly || g.pubOnly
	}
	return a
}
