package a2a

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"

	spec "github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/bub-bus/bub/internal/buildinfo"
)

// Extension URIs the cards declare; docs/A2A.md describes them.
const (
	// ExtensionResumableStreams: every SSE event carries the task's
	// sequence number as its id, and Last-Event-ID resumes after it
	// (a2aproject/A2A#1986).
	ExtensionResumableStreams = "https://github.com/bub-bus/bub/blob/main/docs/A2A.md#resumable-streams"
	// ExtensionIdempotentSend: a SendMessage repeated with the same
	// messageId, or Idempotency-Key header, returns the first task and
	// publishes nothing (a2aproject/A2A#1987).
	ExtensionIdempotentSend = "https://github.com/bub-bus/bub/blob/main/docs/A2A.md#idempotent-send"
)

// bearerScheme is the name of the card's security scheme.
const bearerScheme spec.SecuritySchemeName = "bearer"

// card returns agent a's card, its interface at base (the URL up to
// and excluding /a2a/).
func (s *Server) card(a *agent, base string) *spec.AgentCard {
	skills := make([]spec.AgentSkill, 0, len(a.Skills))
	for _, sk := range a.Skills {
		tags := sk.Tags
		if tags == nil {
			tags = []string{}
		}
		skills = append(skills, spec.AgentSkill{ID: sk.ID, Name: sk.Name, Description: sk.Description, Tags: tags, Examples: sk.Examples})
	}
	c := &spec.AgentCard{
		Name:        a.Name,
		Description: a.Description,
		Version:     buildinfo.Version(),
		SupportedInterfaces: []*spec.AgentInterface{{
			URL:             base + "/a2a/" + a.Name,
			ProtocolBinding: spec.TransportProtocolJSONRPC,
			ProtocolVersion: "1.0",
		}},
		Provider:           &spec.AgentProvider{Org: "bub-bus", URL: "https://github.com/bub-bus/bub"},
		DefaultInputModes:  []string{"text/plain", "application/json"},
		DefaultOutputModes: []string{"text/plain", "application/json"},
		Skills:             skills,
		Capabilities: spec.AgentCapabilities{
			Streaming:         true,
			PushNotifications: s.push != nil,
			Extensions: []spec.AgentExtension{
				{
					URI:         ExtensionResumableStreams,
					Description: "Every SSE event's id is the task's sequence number; SubscribeToTask or a repeated SendStreamingMessage with Last-Event-ID gets exactly the events after it (a2aproject/A2A#1986).",
					Params:      map[string]any{"proposal": "https://github.com/a2aproject/A2A/issues/1986"},
				},
				{
					URI:         ExtensionIdempotentSend,
					Description: s.idempotencyDescription(),
					Params:      map[string]any{"proposal": "https://github.com/a2aproject/A2A/issues/1987", "retentionSeconds": int(s.opts.Retention.Seconds())},
				},
			},
		},
	}
	if s.opts.Secured() {
		c.SecuritySchemes = spec.NamedSecuritySchemes{bearerScheme: spec.HTTPAuthSecurityScheme{
			Scheme:      "Bearer",
			Description: "a credential of the bus: an identity's token or a JWT of a configured issuer (docs/SECURITY.md); its grants must allow publishing on the agent's topic",
		}}
		c.SecurityRequirements = spec.SecurityRequirementsOptions{{bearerScheme: {}}}
	}
	return c
}

// baseURL is Options.PublicURL, or the request's own scheme and host.
func (s *Server) baseURL(r *http.Request) string {
	if s.opts.PublicURL != "" {
		return s.opts.PublicURL
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// serveCard answers GET of an agent's card. Cards are public, as
// discovery needs; what they describe needs the credential they name.
func (s *Server) serveCard(w http.ResponseWriter, r *http.Request, a *agent) {
	if !getOnly(w, r) {
		return
	}
	writeCard(w, r, s.card(a, s.baseURL(r)))
}

// idempotencyDescription describes the idempotent send as configured.
func (s *Server) idempotencyDescription() string {
	by := "the same messageId, or Idempotency-Key header,"
	if s.opts.IdempotencyHeaderOnly {
		by = "the same Idempotency-Key header"
	}
	return "A SendMessage repeated with " + by + " within the retention window returns the first task and publishes nothing (a2aproject/A2A#1987)."
}

// writeCard writes a card, or the catalog, with the caching headers
// §8.6.1 asks for: Cache-Control and an ETag, the hash of the body, so
// that a client revalidates with If-None-Match and gets 304 until the
// card changes (a SIGHUP that turns auth on, say).
func writeCard(w http.ResponseWriter, r *http.Request, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "encode the agent card: "+err.Error(), http.StatusInternalServerError)
		return
	}
	sum := sha256.Sum256(body)
	etag := `"` + hex.EncodeToString(sum[:16]) + `"`
	h := w.Header()
	h.Set("Cache-Control", "public, max-age=60")
	h.Set("ETag", etag)
	if r.Header.Get("If-None-Match") == etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	h.Set("Content-Type", "application/json")
	_, _ = w.Write(append(body, '\n')) // a client gone away; nothing left to tell it
}

// serveCatalog answers GET of every agent's card, in configuration order.
func (s *Server) serveCatalog(w http.ResponseWriter, r *http.Request) {
	if !getOnly(w, r) {
		return
	}
	base := s.baseURL(r)
	cards := make([]*spec.AgentCard, 0, len(s.opts.Agents))
	for _, a := range s.opts.Agents {
		cards = append(cards, s.card(s.agents[a.Name], base))
	}
	writeCard(w, r, map[string]any{"agents": cards})
}

func getOnly(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return true
	}
	w.Header().Set("Allow", "GET, HEAD")
	http.Error(w, "agent cards are read with GET", http.StatusMethodNotAllowed)
	return false
}
