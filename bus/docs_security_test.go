package bus_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/auth"
	"github.com/bub-bus/bub/auth/authtest"
	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/protocol"
)

// TestSecurityContainmentTable subscribes, over a real connection, to
// every pattern of docs/SECURITY.md's containment examples, with the
// allow and deny lists the doc gives, and checks the bus's answer
// against the table's "allowed" column.
func TestSecurityContainmentTable(t *testing.T) {
	data, err := os.ReadFile("../docs/SECURITY.md")
	require.NoError(t, err)
	doc := string(data)
	rules := regexp.MustCompile("Examples, with `allow: \\[(.*?)\\]`\\s+and `deny: \\[(.*?)\\]`").FindStringSubmatch(strings.ReplaceAll(doc, "\n", " "))
	require.NotNil(t, rules, "SECURITY.md: no \"Examples, with `allow: [...]` and `deny: [...]`\" before the containment table")
	list := func(s string) []string {
		var out []string
		for _, item := range strings.Split(s, ",") {
			out = append(out, strings.Trim(strings.TrimSpace(item), `"`))
		}
		return out
	}
	authn, err := auth.New(auth.Config{Identities: []auth.Identity{{
		Name: "doc", TokenSHA256: authtest.SHA256("doc-token"),
		Grant: auth.Grant{ClientIDs: []string{"doc-*"}, Subscribe: auth.Rules{Allow: list(rules[1]), Deny: list(rules[2])}},
	}}}, t.TempDir())
	require.NoError(t, err)
	srv := bustest.Start(t, &bus.Options{Auth: authn})

	_, table, ok := strings.Cut(doc, "| subscription | allowed | why |\n|---|---|---|\n")
	require.True(t, ok, "SECURITY.md: no containment table")
	row := regexp.MustCompile("^\\| (.*) \\| (yes|no) \\| .* \\|$")
	pattern := regexp.MustCompile("`([^`]+)`")
	n := 0
	for _, line := range strings.Split(table, "\n") {
		m := row.FindStringSubmatch(line)
		if m == nil {
			break
		}
		for _, p := range pattern.FindAllStringSubmatch(m[1], -1) {
			n++
			c := bustest.DialToken(t, srv.URL, "doc-token")
			c.MustCall(protocol.MethodInitialize, protocol.InitializeParams{ClientID: "doc-1"}, nil)
			r := c.Call(protocol.MethodSubscribe, protocol.SubscribeParams{Topic: p[1]})
			if allowed := r.Error == nil; allowed != (m[2] == "yes") {
				t.Errorf("SECURITY.md: %q is listed as allowed: %s, the bus answers %+v", p[1], m[2], r.Error)
			}
		}
	}
	require.Greater(t, n, 5, "SECURITY.md's containment table has too few patterns: has its form changed?")
}
