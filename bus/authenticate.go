package bus

import (
	"net"
	"net/http"
	"net/url"
	"path"
	"strings"

	"github.com/bub-bus/bub/auth"
	"github.com/bub-bus/bub/protocol"
)

// Authenticate finds who an HTTP request to an add-on's door is, as
// every door of the bus does (docs/SECURITY.md): RequestCredential, then
// Verify. It returns the principal, nil on an open bus. A refusal is
// counted in bub_auth_refusals_total and is a protocol error to answer
// as it is: forbidden for a browser, unauthorized (saying which header
// to send) for the credential.
func (s *Server) Authenticate(r *http.Request) (*auth.Principal, error) {
	cred, err := s.RequestCredential(r)
	if err != nil {
		return nil, err
	}
	return s.Verify(cred)
}

// RequestCredential reads r's credential, as POST /v1/messages does: a
// browser's request (one with Origin) must reach an address of this bus
// (Options.Hosts) from its own origin or one of Options.OriginPatterns;
// the credential is the bearer token, else a verified client
// certificate's name, else none (the anonymous grant, if any). A door
// that outlives its request (a stream) keeps it, to Verify it again once
// SetAuth replaced the Authenticator (Auth).
func (s *Server) RequestCredential(r *http.Request) (Credential, error) {
	if err := s.CheckBrowser(r); err != nil {
		return Credential{}, err
	}
	cred, err := bearer(r)
	if err != nil {
		s.metrics.authRefusals.WithLabelValues(refuseCredential).Inc()
		return Credential{}, err
	}
	return Credential{c: cred}, nil
}

// Verify checks cred against the credentials in force now and returns
// who presented it: nil on an open bus, which checks no credential. A
// refusal is counted in bub_auth_refusals_total and is a 401's error,
// which says the header to send.
func (s *Server) Verify(cred Credential) (*auth.Principal, error) {
	a := s.auth.Load()
	if a == nil {
		return nil, nil
	}
	principal, err := s.authenticate(a, cred.c)
	if err != nil {
		s.metrics.authRefusals.WithLabelValues(refuseCredential).Inc()
		return nil, httpUnauthorized(cred.c)
	}
	return principal, nil
}

// Auth returns the Authenticator in force, nil on an open bus. A door
// that outlives its request (a stream) compares it with the one it
// authenticated against, to decide again once SetAuth replaced it.
func (s *Server) Auth() *auth.Authenticator { return s.auth.Load() }

// Authorize decides what principal (Authenticate's) may do publishing
// as clientID, as initialize does for a publishOnly connection: the
// clientId must be valid, not reserved for the bus's own, and allowed by
// the grant's client_ids. It returns the access for Publisher.SetGrant,
// nil with principal nil (an open bus). A refusal is counted and logged
// as initialize's.
func (s *Server) Authorize(principal *auth.Principal, clientID string) (*auth.Access, error) {
	if err := protocol.ValidateClientID(clientID); err != nil {
		return nil, protocol.Errorf(protocol.ErrInvalidClientInfo, "%v", err)
	}
	if err := s.checkReservedClientID(s.log, clientID); err != nil {
		return nil, err
	}
	if principal == nil {
		return nil, nil
	}
	return s.grant(s.log, principal, clientID, true)
}

// A Credential is what a request presented: a bearer token, a verified
// client certificate's name. An add-on may keep it, to check it again
// later (a reload may revoke it); the token is never logged.
type Credential struct {
	c credential
}

// CredentialOf is the credential of r's verified client certificate, if
// any, with token: one a form carried (a login), not a header.
func CredentialOf(r *http.Request, token string) Credential {
	c, _ := bearer(r)
	c.token = token
	return Credential{c: c}
}

// RefusedAdmin counts, in bub_auth_refusals_total, a request refused
// because its credential lacks admin.
func (s *Server) RefusedAdmin() {
	s.metrics.authRefusals.WithLabelValues(refuseAdmin).Inc()
}

// RefusedBrowser counts, in bub_auth_refusals_total, a request refused
// because a browser sent it (it has an Origin header).
func (s *Server) RefusedBrowser() {
	s.metrics.authRefusals.WithLabelValues(refuseHost).Inc()
}

// HTTPUnauthorized says, in a 401's body, how to present a credential
// over HTTP, as the core's own 401s do.
const HTTPUnauthorized = httpUnauthorizedDetail

// PublisherFor verifies cred and authorizes it as clientID, as
// initialize does for a publish-only connection, and returns a
// publisher for it (NewPublisher): per-identity limits and quotas count
// it as they count every door's.
func (s *Server) PublisherFor(cred Credential, clientID, remote string) (*Publisher, error) {
	principal, err := s.Verify(cred)
	if err != nil {
		return nil, err
	}
	access, err := s.Authorize(principal, clientID)
	if err != nil {
		return nil, err
	}
	p := s.NewPublisher(clientID, "", remote, "remote", remote)
	p.SetGrant(principal, access)
	return p, nil
}

// TakeStream counts a stream of identity ("" on an open bus, which
// counts nothing) against Limits.MaxStreamsPerIdentity, and returns its
// release; past the cap it returns a limit_reached error.
func (s *Server) TakeStream(identity string) (release func(), err error) {
	if identity == "" {
		return func() {}, nil
	}
	bound := s.limits().MaxStreamsPerIdentity
	release, held := s.limitState.identityStreams.Take(identity, bound)
	if release != nil {
		return release, nil
	}
	return nil, s.limitReached(limitStreamsPerIdentity, "identity %q holds %d event streams open, its limit %d; close one first", identity, held, bound)
}

// bearer reads the request's credential: a bearer token, and a verified
// client certificate's name.
func bearer(r *http.Request) (credential, error) {
	var cred credential
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
		cred.certCN = r.TLS.VerifiedChains[0][0].Subject.CommonName
	}
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, token, _ := strings.Cut(h, " ")
		if !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
			return cred, protocol.Errorf(protocol.ErrUnauthorized, "the Authorization header must be \"Bearer TOKEN\"")
		}
		cred.token = strings.TrimSpace(token)
	}
	return cred, nil
}

// CheckBrowser refuses a browser's request (one with Origin) whose Host
// is not an address of this bus (DNS rebinding) or whose Origin is
// neither that host nor one of Options.OriginPatterns, as the WebSocket
// upgrade does; the refusal is counted and is a -32003.
func (s *Server) CheckBrowser(r *http.Request) error {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return nil
	}
	if !s.HostAllowed(r) {
		s.metrics.authRefusals.WithLabelValues(refuseHost).Inc()
		return protocol.Errorf(protocol.ErrForbidden, "Host %q is not an address this bus serves; an operator adds it with --hosts", r.Host)
	}
	u, err := url.Parse(origin)
	if err == nil && strings.EqualFold(u.Host, r.Host) {
		return nil
	}
	if err == nil {
		for _, p := range s.opts.OriginPatterns {
			if ok, _ := path.Match(strings.ToLower(p), strings.ToLower(u.Host)); ok {
				return nil
			}
		}
	}
	s.metrics.authRefusals.WithLabelValues(refuseHost).Inc()
	return protocol.Errorf(protocol.ErrForbidden, "Origin %q is not allowed; an operator adds it with --allowed-origins", origin)
}

// HostAllowed reports whether r's Host names this bus: the address it
// was reached on, localhost on that port when that address is loopback,
// or a name the operator configured (Options.Hosts). A door served to
// loopback only checks it too, so that a web page cannot reach it
// through DNS rebinding.
func (s *Server) HostAllowed(r *http.Request) bool {
	host := r.Host
	for _, h := range s.opts.Hosts {
		if strings.EqualFold(host, h) {
			return true
		}
		if name, _, err := net.SplitHostPort(host); err == nil && strings.EqualFold(name, h) {
			return true
		}
	}
	local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return false
	}
	if host == local.String() {
		return true
	}
	lhost, lport, err := net.SplitHostPort(local.String())
	if err != nil {
		return false
	}
	name, port, err := net.SplitHostPort(host)
	if err != nil || port != lport {
		return false
	}
	ip := net.ParseIP(lhost)
	if ip != nil && ip.IsLoopback() {
		return strings.EqualFold(name, "localhost") || net.ParseIP(strings.Trim(name, "[]")).IsLoopback()
	}
	return false
}
