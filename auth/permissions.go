package auth

import (
	"fmt"
	"strings"

	"github.com/bub-bus/bub/protocol"
)

// template is one rule pattern as configured, possibly holding
// {{clientId}}.
type template struct {
	raw string
	// fixed is the compiled pattern when raw has no {{clientId}}: it is
	// compiled once, at load.
	fixed *protocol.Pattern
	// kind is the pattern's kind with the placeholder clientId. A real
	// clientId that changes it (an id ending in ':' or '-' turns
	// "agent:{{clientId}}" from Exact into Prefix, matching other
	// agents' topics) widens the rule, so binding refuses it.
	kind protocol.PatternKind
}

// compileTemplate checks that raw is a valid pattern once {{clientId}} is
// replaced.
func compileTemplate(raw string) (template, error) {
	if !strings.Contains(raw, clientIDVar) {
		p, err := protocol.ParsePattern(raw)
		if err != nil {
			return template{}, err
		}
		return template{raw: raw, fixed: p, kind: p.Kind()}, nil
	}
	p, err := protocol.ParsePattern(strings.ReplaceAll(raw, clientIDVar, placeholderClientID))
	if err != nil {
		return template{}, err
	}
	return template{raw: raw, kind: p.Kind()}, nil
}

// bind returns the pattern for clientID, or false when it cannot be
// compiled as the operator meant it: the id is not a plain clientId, the
// result does not parse (too long, say), or its kind changed.
func (t template) bind(clientID string) (*protocol.Pattern, bool) {
	if t.fixed != nil {
		return t.fixed, true
	}
	if !plainClientID(clientID) {
		return nil, false
	}
	p, err := protocol.ParsePattern(strings.ReplaceAll(t.raw, clientIDVar, clientID))
	if err != nil || p.Kind() != t.kind {
		return nil, false
	}
	return p, true
}

// ruleSet is a compiled Rules, not yet bound to a clientId.
type ruleSet struct {
	allow, deny []template
}

// compileRules compiles r; what names the list in errors ("publish").
func compileRules(what string, r Rules) (ruleSet, error) {
	var rs ruleSet
	for _, list := range []struct {
		name     string
		patterns []string
		into     *[]template
	}{{"allow", r.Allow, &rs.allow}, {"deny", r.Deny, &rs.deny}} {
		for _, raw := range list.patterns {
			t, err := compileTemplate(raw)
			if err != nil {
				return ruleSet{}, fmt.Errorf("%s %s pattern %q: %w", what, list.name, raw, err)
			}
			*list.into = append(*list.into, t)
		}
	}
	return rs, nil
}

// bind compiles the rules for clientID, failing closed: an allow pattern
// that cannot be bound allows nothing, a deny pattern that cannot be
// bound denies everything.
func (rs ruleSet) bind(clientID string) boundRules {
	var b boundRules
	for _, t := range rs.allow {
		if p, ok := t.bind(clientID); ok {
			b.allow = append(b.allow, p)
		}
	}
	for _, t := range rs.deny {
		p, ok := t.bind(clientID)
		if !ok {
			b.denyAll = true
			continue
		}
		b.deny = append(b.deny, p)
	}
	return b
}

// boundRules are a ruleSet compiled for one clientId.
type boundRules struct {
	allow, deny []*protocol.Pattern
	// denyAll: a deny pattern could not be bound, so what it would have
	// denied is unknown and everything is denied.
	denyAll bool
}

// allowsTopic reports whether the rules allow publishing to topic.
func (b *boundRules) allowsTopic(topic string) bool {
	if b.denyAll {
		return false
	}
	for _, d := range b.deny {
		if d.Match(topic) {
			return false
		}
	}
	system := isSystemTopic(topic)
	for _, a := range b.allow {
		if (!system || grantsSystem(a)) && a.Match(topic) {
			return true
		}
	}
	return false
}

// allowsPattern reports whether the rules allow subscribing to p: an
// allow pattern covers it, and no deny pattern could match a topic it
// matches. When p could match a system: topic, the covering allow
// pattern must itself start with "system:".
func (b *boundRules) allowsPattern(p *protocol.Pattern) bool {
	if b.denyAll {
		return false
	}
	for _, d := range b.deny {
		if overlaps(d, p) {
			return false
		}
	}
	system := mayMatchSystem(p)
	for _, a := range b.allow {
		if (!system || grantsSystem(a)) && covers(a, p) {
			return true
		}
	}
	return false
}

// grant is a compiled Grant or Claims: what one source of authority
// allows. A principal holds one grant per source, and all must allow.
type grant struct {
	publish, subscribe       ruleSet
	admin, fallback, pubOnly bool
	durable, waker           bool
}

func compileGrant(publish, subscribe Rules, admin, fallback, publishOnly bool) (*grant, error) {
	pub, err := compileRules("publish", publish)
	if err != nil {
		return nil, err
	}
	sub, err := compileRules("subscribe", subscribe)
	if err != nil {
		return nil, err
	}
	return &grant{publish: pub, subscribe: sub, admin: admin, fallback: fallback, pubOnly: publishOnly}, nil
}

// Access is a principal's permissions for one connection. It is
// immutable and safe for concurrent use.
//
// A principal may carry several grants (a JWT's claims and its issuer's
// ceiling); every check passes only when every grant allows it, which is
// how a token's permissions are the intersection of the two.
type Access struct {
	publish, subscribe []boundRules
	admin, fallback    bool
	durable, waker     bool
	publishOnly        bool
	rate               Rate
	maxPending         int
}

// CanPublish reports whether topic may be published to. A system: topic
// needs an allow pattern that itself starts with "system:";
// protocol.BusOwnedTopic topics are never allowed.
//
// Every grant must have an allow pattern matching topic and no deny
// pattern matching it. A topic that is not valid (pattern characters,
// say) is refused rather than matched literally.
func (a *Access) CanPublish(topic string) bool {
	if a == nil || len(a.publish) == 0 || protocol.BusOwnedTopic(topic) || protocol.ValidateTopic(topic) != nil {
		return false
	}
	for i := range a.publish {
		if !a.publish[i].allowsTopic(topic) {
			return false
		}
	}
	return true
}

// CanSubscribe reports whether p may be subscribed to: every topic it
// could match must be allowed and none denied; when that cannot be
// decided simply, false. The system: rule applies as for CanPublish.
//
// In every grant, some allow pattern must cover p and no deny pattern
// may overlap it (both decided conservatively; docs/SECURITY.md gives
// the rules). The system: rule, in one sentence: a pattern that could
// match a system: topic (its literal part, before any * ? [, starts with
// "system:" or is a prefix of it) must be covered by an allow pattern
// that starts with "system:". So "*", "s*" or "sys?em:*" can never be
// subscribed with auth on: subscribe "system:*" and the other namespaces
// separately.
func (a *Access) CanSubscribe(p *protocol.Pattern) bool {
	if a == nil || p == nil || len(a.subscribe) == 0 {
		return false
	}
	for i := range a.subscribe {
		if !a.subscribe[i].allowsPattern(p) {
			return false
		}
	}
	return true
}

// Admin reports whether the dlq.* methods may be called: only when every
// grant (a JWT's claims and its issuer's ceiling) says so.
func (a *Access) Admin() bool { return a != nil && a.admin }

// Fallback reports whether a fallback subscription may be held: only
// when every grant says so.
func (a *Access) Fallback() bool { return a != nil && a.fallback }

// Durable reports whether durable subscriptions may be held: only when
// every grant says so.
func (a *Access) Durable() bool { return a != nil && a.durable }

// Waker reports whether the credential may register as a clientId's
// waker: only when every grant says so.
func (a *Access) Waker() bool { return a != nil && a.waker }

// PublishOnly reports whether the credential is limited to publish-only
// connections (no subscriptions, no takeover of its clientId). It is a
// restriction, not a permission, so it holds when any grant sets it: a
// token whose claims omit it stays bound by a ceiling that sets it.
func (a *Access) PublishOnly() bool { return a == nil || a.publishOnly }

// Rate is the publish rate the credential sets; zero: none set. For a
// JWT it is the issuer ceiling's: claims do not carry rates.
func (a *Access) Rate() Rate {
	if a == nil {
		return Rate{}
	}
	return a.rate
}

// MaxPending is the identity's cap on stored retries and holds; zero:
// none set. For a JWT it is the issuer ceiling's.
func (a *Access) MaxPending() int {
	if a == nil {
		return 0
	}
	return a.maxPending
}

// ReadRules are the subscribe rules of an Access, bound to its clientId,
// as data that travels: the node of a cluster a reader asks sends them
// with a journal search to the other nodes, which show the reader only
// the topics they allow (Access rebuilds the check). One entry per grant,
// all of which must allow, as in CanSubscribe.
type ReadRules struct {
	Grants []ReadGrant `json:"grants"`
}

// ReadGrant is one grant's subscribe rules: the allow and deny patterns,
// and DenyAll when a deny pattern could not be bound (everything denied).
type ReadGrant struct {
	Allow   []string `json:"allow,omitempty"`
	Deny    []string `json:"deny,omitempty"`
	DenyAll bool     `json:"denyAll,omitempty"`
}

// ReadRules returns what a may subscribe to, as data.
func (a *Access) ReadRules() ReadRules {
	var r ReadRules
	if a == nil {
		return r
	}
	for _, b := range a.subscribe {
		g := ReadGrant{DenyAll: b.denyAll}
		for _, p := range b.allow {
			g.Allow = append(g.Allow, p.String())
		}
		for _, p := range b.deny {
			g.Deny = append(g.Deny, p.String())
		}
		r.Grants = append(r.Grants, g)
	}
	return r
}

// Access rebuilds an Access whose only right is to subscribe as r
// allows: CanSubscribe decides as it did for the Access r came from. No
// grant allows nothing. A pattern that does not parse is an error naming
// it.
func (r ReadRules) Access() (*Access, error) {
	a := &Access{}
	for i, g := range r.Grants {
		b := boundRules{denyAll: g.DenyAll}
		for _, list := range []struct {
			name     string
			patterns []string
			into     *[]*protocol.Pattern
		}{{"allow", g.Allow, &b.allow}, {"deny", g.Deny, &b.deny}} {
			for _, raw := range list.patterns {
				p, err := protocol.ParsePattern(raw)
				if err != nil {
					return nil, fmt.Errorf("read rules: grant %d: %s pattern %q: %w", i, list.name, raw, err)
				}
				*list.into = append(*list.into, p)
			}
		}
		a.subscribe = append(a.subscribe, b)
	}
	return a, nil
}
