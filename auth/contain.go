package auth

import (
	"strings"

	"github.com/bub-bus/bub/protocol"
)

// This file decides, conservatively, how two patterns relate. Deciding
// exactly whether one glob's language contains another's is possible but
// costly and easy to get wrong; a permission check must never err on the
// side of allowing, so each function below answers only what it can
// prove and otherwise gives the safe answer.

// patternChars are the characters that make a pattern a glob
// (protocol's grammar).
const patternChars = "*?[]"

// covers reports whether every topic p can match is matched by g. It is
// sound but incomplete: true only when provably so, false when unsure.
//
//   - g Exact covers only the same Exact p.
//   - g Prefix covers p when p's literal part starts with g: every topic
//     p matches starts with p's literal part, hence with g.
//   - g Glob covers an Exact p that it matches; a g of the form L* (L
//     free of pattern characters) covers p when p's literal part starts
//     with L, as for a Prefix; any other g covers only the identical
//     pattern.
func covers(g, p *protocol.Pattern) bool {
	switch g.Kind() {
	case protocol.Exact:
		return p.Kind() == protocol.Exact && p.String() == g.String()
	case protocol.Prefix:
		return strings.HasPrefix(p.Literal(), g.String())
	}
	if p.Kind() == protocol.Exact {
		return g.Match(p.String())
	}
	raw := g.String()
	if lit, ok := strings.CutSuffix(raw, "*"); ok && !strings.ContainsAny(lit, patternChars) {
		return strings.HasPrefix(p.Literal(), lit)
	}
	return raw == p.String()
}

// overlaps reports whether some topic could match both d and p. It is
// conservative the other way from covers: false only when provably no
// topic matches both, true when unsure.
//
// When neither literal part is a prefix of the other, the two differ at a
// position both fix, so no topic matches both; otherwise assume overlap.
func overlaps(d, p *protocol.Pattern) bool {
	switch {
	case p.Kind() == protocol.Exact:
		return d.Match(p.String())
	case d.Kind() == protocol.Exact:
		return p.Match(d.String())
	}
	dl, pl := d.Literal(), p.Literal()
	return strings.HasPrefix(dl, pl) || strings.HasPrefix(pl, dl)
}

// systemPrefix starts the topics that need an explicit grant: the bus's
// and the spawner's events.
const systemPrefix = "system:"

// isSystemTopic reports whether topic is in the system: namespace.
func isSystemTopic(topic string) bool { return strings.HasPrefix(topic, systemPrefix) }

// mayMatchSystem reports whether p could match a system: topic: an exact
// p when it is one; otherwise when its literal part starts with "system:"
// or is a prefix of it ("*", "sys*", "s?stem:x"). It may say true for a
// pattern that cannot (say "s[!y]stem:*"), which only makes the check
// stricter.
func mayMatchSystem(p *protocol.Pattern) bool {
	if p.Kind() == protocol.Exact {
		return isSystemTopic(p.String())
	}
	lit := p.Literal()
	return strings.HasPrefix(lit, systemPrefix) || strings.HasPrefix(systemPrefix, lit)
}

// grantsSystem reports whether an allow pattern may grant system: topics:
// only one that names the namespace itself, so that a broad "*" never
// lets a peer forge the spawner's events or watch them.
func grantsSystem(allow *protocol.Pattern) bool { return isSystemTopic(allow.String()) }
