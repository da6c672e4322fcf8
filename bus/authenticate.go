package bus

import (
	"net/http"

	"github.com/bub-bus/bub/auth"
)

// What an add-on's HTTP door needs to take a credential as every door of
// the bus does: the request's credential, checked against the
// Authenticator in force, refusals counted in bub_auth_refusals_total
// and answered in HTTP's terms; the per-identity cap on streams; and
// answers in the HTTP API's form.

// A Credential is what an HTTP request presented: a bearer token, and a
// verified client certificate's name. The zero Credential is none: the
// anonymous grant, if the bus has one.
type Credential struct {
	c credential
}

// CredentialOf reads r's credential, as POST /v1/messages does: it
// refuses a browser's request from a site that is not the bus's
// (Origin, Host: DNS rebinding) and an Authorization header that is not
// "Bearer TOKEN". The error is a protocol error, for WriteError.
func (s *Server) CredentialOf(r *http.Request) (Credential, error) {
	if err := s.checkBrowser(r); err != nil {
		return Credential{}, err
	}
	cred, err := bearer(r)
	if err != nil {
		s.metrics.authRefusals.WithLabelValues(refuseCredential).Inc()
		return Credential{}, err
	}
	return Credential{cred}, nil
}

// Authenticate checks cred against the Authenticator in force and
// returns its principal: nil, and no error, on an open bus. A credential
// refused is counted and answered with a 401's error, which says the
// header to send.
func (s *Server) Authenticate(cred Credential) (*auth.Principal, error) {
	a := s.auth.Load()
	if a == nil {
		return nil, nil
	}
	p, err := s.authenticate(a, cred.c)
	if err != nil {
		s.metrics.authRefusals.WithLabelValues(refuseCredential).Inc()
		return nil, httpUnauthorized(cred.c)
	}
	return p, nil
}

// Auth returns the Authenticator in force, nil on an open bus. A door
// that outlives its request (a stream) compares it with the one it
// authenticated against, to decide again once SetAuth replaced it.
func (s *Server) Auth() *auth.Authenticator { return s.auth.Load() }

// TakeStream counts a stream of identity ("" on an open bus, which
// counts nothing) against Limits.MaxStreamsPerIdentity, and returns its
// release; past the cap it returns a limit_reached error.
func (s *Server) TakeStream(identity string) (release func(), err error) {
	if identity == "" {
		return func() {}, nil
	}
	bound := s.limits().MaxStreamsPerIdentity
	release, held := s.limitState.identityStreams.take(identity, bound)
	if release != nil {
		return release, nil
	}
	return nil, s.limitReached(limitStreamsPerIdentity, "identity %q holds %d event streams open, its limit %d; close one first", identity, held, bound)
}

// WriteJSON answers v as JSON with status, as the HTTP API answers.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	writeJSON(w, status, v)
}

// WriteError answers err as the HTTP API answers its errors: the JSON-RPC
// error object, with status (0: the one err's code maps to), Retry-After
// on a 429 or 503 and WWW-Authenticate on a 401.
func WriteError(w http.ResponseWriter, status int, err error) {
	writeError(w, status, err)
}
