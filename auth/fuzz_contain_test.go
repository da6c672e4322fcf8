package auth

import (
	"strings"
	"testing"

	"github.com/bub-bus/bub/protocol"
)

// FuzzCovers checks the soundness of the containment rules on topics
// built from the fuzzer's input: whenever covers(g, p), every candidate
// topic p matches, g matches too; whenever !overlaps(g, p), no candidate
// topic matches both.
func FuzzCovers(f *testing.F) {
	for _, s := range [][3]string{
		{"agent:*", "agent:x*", "y"},
		{"agent:", "agent:[ab]?", "bz"},
		{"*", "a*b", "ab"},
		{"a*b", "a*b", "aab"},
		{"agent:?", "agent:a", ""},
		{"agent:[!a]*", "agent:b*", "bc"},
		{"tg:secret", "tg:s*", "ecret"},
		{"x-", "x-1", "2"},
		{"a[a-c]*", "ab", "b"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, gs, ps, fill string) {
		g, err := protocol.ParsePattern(gs)
		if err != nil {
			return
		}
		p, err := protocol.ParsePattern(ps)
		if err != nil {
			return
		}
		cov, over := covers(g, p), overlaps(g, p)
		for _, topic := range candidates(p, fill) {
			if protocol.ValidateTopic(topic) != nil || !p.Match(topic) {
				continue
			}
			if cov && !g.Match(topic) {
				t.Fatalf("covers(%q, %q) but %q matches only the second", gs, ps, topic)
			}
			if !over && g.Match(topic) {
				t.Fatalf("!overlaps(%q, %q) but both match %q", gs, ps, topic)
			}
		}
	})
}

// candidates are topics that p may match: its literal part with fill
// after it, and its text with each wildcard replaced by fill or by one of
// fill's characters, and each class by fill's first character.
func candidates(p *protocol.Pattern, fill string) []string {
	one := "a"
	if fill != "" {
		one = fill[:1]
	}
	out := []string{p.String(), p.Literal(), p.Literal() + fill, p.Literal() + one, fill}
	for _, star := range []string{"", one, fill} {
		var b strings.Builder
		raw := p.String()
		for i := 0; i < len(raw); i++ {
			switch raw[i] {
			case '*':
				b.WriteString(star)
			case '?':
				b.WriteString(one)
			case '[':
				if j := strings.IndexByte(raw[i+1:], ']'); j >= 0 {
					i += j + 1
				}
				b.WriteString(one)
			default:
				b.WriteByte(raw[i])
			}
		}
		out = append(out, b.String(), b.String()+fill)
	}
	return out
}
