package auth_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/auth"
	"github.com/bub-bus/bub/protocol"
)

// FuzzReadRules feeds another node's reader rules (JSON, as a journal
// search carries them) to Access: no panic, a bad pattern refused, and
// the rules of the Access it gives are the rules it was given.
func FuzzReadRules(f *testing.F) {
	for _, seed := range []string{
		`{"grants":[{"allow":["agent:main","inbound:*"]}]}`, `{"grants":[{"allow":["*"],"deny":["inbound:secret-*"]},{"allow":["inbound:"]}]}`,
		`{"grants":[{"denyAll":true}]}`, `{}`, `{"grants":[{"allow":["[a-"]}]}`, `{"grants":[{"allow":["system:*"]}]}`,
	} {
		f.Add([]byte(seed), "inbound:x")
	}
	f.Fuzz(func(t *testing.T, raw []byte, topic string) {
		var r auth.ReadRules
		if json.Unmarshal(raw, &r) != nil {
			return
		}
		a, err := r.Access()
		if err != nil {
			require.NotEmpty(t, err.Error())
			return
		}
		if p, err := protocol.ParsePattern(topic); err == nil {
			may := a.CanSubscribe(p)
			require.True(t, !may || len(r.Grants) > 0, "no grant allows nothing")
			require.False(t, a.CanPublish(topic) || a.Admin(), "read rules give no other right")
		}
		back := a.ReadRules()
		require.Len(t, back.Grants, len(r.Grants))
		for i, g := range r.Grants {
			require.Equal(t, len(g.Allow), len(back.Grants[i].Allow))
			require.Equal(t, len(g.Deny), len(back.Grants[i].Deny))
			require.Equal(t, g.DenyAll, back.Grants[i].DenyAll)
		}
	})
}
