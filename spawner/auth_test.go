package spawner_test

import (
	"os"
	"testing"

	"github.com/bub-bus/bub/auth"
	"github.com/bub-bus/bub/auth/authtest"
	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/spawner"
)

// TestAgentsGetTheirOwnCredential runs the spawner as an issuer on a bus
// with auth: the agent it starts connects with the token it minted, may
// answer its chat, and may not act beyond its template.
func TestAgentsGetTheirOwnCredential(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key := authtest.Issuer(t, dir, "spawner.pub")
	a, err := auth.New(auth.Config{
		Identities: []auth.Identity{
			{Name: "spawner", TokenSHA256: authtest.SHA256("spawner-token"), Grant: auth.Grant{
				ClientIDs: []string{"spawner"},
				Publish:   auth.Rules{Allow: []string{"system:agent.*"}},
				Subscribe: auth.Rules{Allow: []string{"system:client.*", "tg:*", "agent:*"}},
				Fallback:  true,
			}},
			{Name: "tester", TokenSHA256: authtest.SHA256("tester-token"), Grant: auth.Grant{
				ClientIDs: []string{"tester"},
				Publish:   auth.Rules{Allow: []string{"tg:*"}},
				Subscribe: auth.Rules{Allow: []string{"outbound:*", "system:agent.*"}},
			}},
		},
		Issuers: []auth.Issuer{{
			Name: "spawner", PublicKeyFile: "spawner.pub", ClientIDs: []string{"agent-*"},
			Ceiling: auth.Grant{
				Publish:   auth.Rules{Allow: []string{"outbound:*"}},
				Subscribe: auth.Rules{Allow: []string{"agent:{{clientId}}", "tg:*"}},
			},
		}},
	}, dir)
	if err != nil {
		t.Fatal(err)
	}
	// The spawner's own BUB_TOKEN is in the environment agents inherit
	// from; they must get their own instead.
	env := append(os.Environ(), "BUB_TOKEN=spawner-token")
	h := newHarnessAs(t, spawner.Options{
		Token:  "spawner-token",
		Env:    env,
		Issuer: &spawner.Issuer{Name: "spawner", Key: key},
	}, &bus.Options{Auth: a}, "tester-token")

	h.send(t, "tg:42", map[string]any{"type": "telegram_message", "text": "hi", "chat_id": "42"})
	r := h.replyWithText(t, "echo: hi")
	if r.topic != "outbound:42" {
		t.Fatalf("reply on %s", r.topic)
	}

	// The reply came from an agent that initialized as agent-…: the
	// spawner's token, which the agent's environment had, grants only
	// "spawner", so the agent connected with the token minted for it.
	if r.AgentID == "" || r.AgentID == "spawner" {
		t.Fatalf("reply from %q", r.AgentID)
	}
}
