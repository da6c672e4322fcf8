package a2a

import (
	"strings"
	"testing"
)

// FuzzCardLocation: any --agent value is split without a panic into a
// base URL and a card path the resolver can join, or refused naming it.
func FuzzCardLocation(f *testing.F) {
	for _, s := range []string{"http://h/a2a/echo", "https://h/x/card.json", "http://h/", "ftp://h", "", "http://", "http://h/a%2Fb.json"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, agent string) {
		base, path, err := cardLocation(agent)
		switch {
		case err != nil:
			if !strings.Contains(err.Error(), "agent") {
				t.Fatalf("error %q does not name the agent", err)
			}
		case !strings.HasPrefix(base, "http://") && !strings.HasPrefix(base, "https://"):
			t.Fatalf("%q: base %q", agent, base)
		case path != "" && !strings.HasSuffix(path, ".json"):
			t.Fatalf("%q: card path %q", agent, path)
		}
	})
}
