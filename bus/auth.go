package bus

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/bub-bus/bub/auth"
	"github.com/bub-bus/bub/protocol"
)

// Identity and access control (docs/SECURITY.md). A credential arrives
// with the WebSocket upgrade (Authorization: Bearer, or a verified TLS
// client certificate) or, for clients that cannot set headers, in
// initialize's token. It is checked once, at initialize, against the
// Authenticator in force; the Access it yields is what every later
// subscribe, sendMessage and dlq.* call is checked against. A reload
// (SetAuth) checks every connection again.

// Refusal reasons, the values of bub_auth_refusals_total's label.
const (
	refuseHost         = "host"
	refuseCredential   = "credential"
	refuseClientID     = "client_id"
	refusePublishOnly  = "publish_only"
	refusePublish      = "publish"
	refuseBusTopic     = "bus_topic"
	refuseSubscribe    = "subscribe"
	refuseFallback     = "fallback"
	refuseDurable      = "durable"
	refuseWaker        = "waker"
	refuseAdmin        = "admin"
	closeRevoked       = "credential revoked"
	closePermsChanged  = "permissions no longer allow a subscription"
	closeUnauthorized  = "credential not accepted"
	unauthorizedDetail = "present a token the bus accepts: Authorization: Bearer TOKEN on the upgrade, or token in initialize (docs/SECURITY.md)"
	// httpUnauthorizedDetail says the same to an HTTP request.
	httpUnauthorizedDetail = "send the header Authorization: Bearer TOKEN with a token this bus accepts (docs/SECURITY.md)"
)

// httpUnauthorized is the 401 of an HTTP request whose credential cred
// was refused, in HTTP's terms: the header to send.
func httpUnauthorized(cred credential) error {
	if cred.token == "" && cred.certCN == "" {
		return protocol.Errorf(protocol.ErrUnauthorized, "no credential: this bus needs one; %s", httpUnauthorizedDetail)
	}
	return protocol.Errorf(protocol.ErrUnauthorized, "credential not accepted (unknown, expired or revoked); %s", httpUnauthorizedDetail)
}

// credential is what a connection presented, kept so that a reload can
// check it again. The token is never logged.
type credential struct {
	token  string
	certCN string
}

// checkUpgrade runs before the WebSocket handshake: it refuses a browser
// request whose Host is not an address this bus serves (DNS rebinding)
// and a bearer token the bus does not accept, each with an HTTP error,
// and returns what the request presented.
func (s *Server) checkUpgrade(w http.ResponseWriter, r *http.Request) (credential, bool) {
	var cred credential
	if r.Header.Get("Origin") != "" && !s.HostAllowed(r) {
		s.metrics.authRefusals.WithLabelValues(refuseHost).Inc()
		s.log.Warn("upgrade refused: Host is not an address of this bus", "remote", r.RemoteAddr, "host", r.Host, "origin", r.Header.Get("Origin"))
		http.Error(w, fmt.Sprintf("bub-bus: Host %q is not an address this bus serves; an operator adds it with --hosts", r.Host), http.StatusForbidden)
		return cred, false
	}
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
		cred.certCN = r.TLS.VerifiedChains[0][0].Subject.CommonName
	}
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, token, _ := strings.Cut(h, " ")
		if !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
			s.metrics.authRefusals.WithLabelValues(refuseCredential).Inc()
			s.log.Warn("upgrade refused: Authorization is not a bearer token", "remote", r.RemoteAddr)
			w.Header().Set("WWW-Authenticate", `Bearer realm="bub"`)
			http.Error(w, "bub-bus: the Authorization header must be \"Bearer TOKEN\"", http.StatusUnauthorized)
			return cred, false
		}
		cred.token = strings.TrimSpace(token)
	}
	a := s.auth.Load()
	if a == nil || cred.token == "" {
		// An open bus ignores credentials; a request without a token
		// may still present one in initialize, or be its certificate's
		// identity, or anonymous: initialize decides.
		return cred, true
	}
	if _, err := s.authenticate(a, cred); err != nil {
		s.metrics.authRefusals.WithLabelValues(refuseCredential).Inc()
		s.log.Warn("upgrade refused: credential not accepted", "remote", r.RemoteAddr, "reason", err)
		w.Header().Set("WWW-Authenticate", `Bearer realm="bub", error="invalid_token"`)
		http.Error(w, "bub-bus: credential not accepted", http.StatusUnauthorized)
		return cred, false
	}
	return cred, true
}

// authenticate checks a credential: a token wins over a certificate, a
// verified certificate that names no identity is no credential, and no
// credential at all means the anonymous grant, if any.
func (s *Server) authenticate(a *auth.Authenticator, cred credential) (*auth.Principal, error) {
	if cred.token == "" && cred.certCN != "" {
		if p, err := a.AuthenticateCert(cred.certCN); err == nil {
			return p, nil
		}
	}
	return a.Authenticate(cred.token, time.Now())
}

// handshakeGrant is what authorizeInitialize found a connection to be,
// and the Authenticator it checked against (nil: an open bus).
type handshakeGrant struct {
	principal *auth.Principal
	access    *auth.Access
	against   *auth.Authenticator
}

// authorizeInitialize decides who an initializing connection is under
// the Authenticator in force (authorizeAgainst), and notes which that
// was.
func (c *conn) authorizeInitialize(p *protocol.InitializeParams) (handshakeGrant, error) {
	a := c.server.auth.Load()
	principal, access, err := c.authorizeAgainst(a, p)
	return handshakeGrant{principal: principal, access: access, against: a}, err
}

// reauthorizeLocked checks the connection again when a reload replaced
// the Authenticator since g was found. The caller holds Server.mu, which
// SetAuth takes to swap it: once initialize commits under that lock with
// a grant from the Authenticator in force, a later reload sees the
// connection initialized and checks it, and an earlier one was seen
// here. Without it, a connection whose credential a reload revoked
// between its check and its commit would keep what it was granted.
func (c *conn) reauthorizeLocked(p *protocol.InitializeParams, g *handshakeGrant) error {
	if c.server.auth.Load() == g.against {
		return nil
	}
	var err error
	*g, err = c.authorizeInitialize(p)
	return err
}

// authorizeAgainst decides who an initializing connection is under a:
// the principal and its access for clientID, or the refusal. With a nil
// (an open bus) both are nil and everything is allowed.
func (c *conn) authorizeAgainst(a *auth.Authenticator, p *protocol.InitializeParams) (*auth.Principal, *auth.Access, error) {
	if a == nil {
		return nil, nil, nil
	}
	// cred is read under c.mu: a reload (SetAuth) reads it concurrently.
	c.mu.Lock()
	if p.Token != "" && c.cred.token != "" && subtle.ConstantTimeCompare([]byte(c.cred.token), []byte(p.Token)) != 1 {
		c.mu.Unlock()
		return nil, nil, c.refuse(refuseCredential, "", p.ClientID, "two different credentials",
			protocol.Errorf(protocol.ErrUnauthorized, "the upgrade and initialize carry different tokens; present one"))
	}
	if p.Token != "" {
		c.cred.token = p.Token
	}
	cred := c.cred
	c.mu.Unlock()
	principal, err := c.server.authenticate(a, cred)
	if err != nil {
		if errors.Is(err, auth.ErrNoCredential) {
			return nil, nil, c.refuse(refuseCredential, "", p.ClientID, err.Error(),
				protocol.Errorf(protocol.ErrUnauthorized, "no credential presented; %s", unauthorizedDetail))
		}
		return nil, nil, c.refuse(refuseCredential, "", p.ClientID, err.Error(),
			protocol.Errorf(protocol.ErrUnauthorized, "credential not accepted; %s", unauthorizedDetail))
	}
	access, err := c.server.grant(c.log, principal, p.ClientID, p.PublishOnly)
	if err != nil {
		return nil, nil, err
	}
	return principal, access, nil
}

// grant decides what principal may do as clientID, publishing only or
// not, or refuses (logged to log): the grant's client_ids must allow the
// clientId, and a publish-only grant publishOnly.
func (s *Server) grant(log *slog.Logger, principal *auth.Principal, clientID string, publishOnly bool) (*auth.Access, error) {
	if !principal.AllowsClientID(clientID) {
		return nil, s.refuse(log, refuseClientID, principal.Name(), clientID, "clientId not granted",
			protocol.Errorf(protocol.ErrForbidden, "credential %q may not initialize as clientId %q", principal.Name(), clientID))
	}
	access := principal.Bind(clientID)
	if access.PublishOnly() && !publishOnly {
		return nil, s.refuse(log, refusePublishOnly, principal.Name(), clientID, "publish-only credential",
			protocol.Errorf(protocol.ErrForbidden, "credential %q allows only publishOnly connections; initialize with publishOnly: true", principal.Name()))
	}
	return access, nil
}

// serverIDPrefix starts every serverId the bus makes up (Options.ServerID).
// No clientId may start with it, in any case.
const serverIDPrefix = "bub-"

// checkReservedClientID refuses the bus's serverId, in any case, and
// every id starting with serverIDPrefix as a clientId, whatever the
// credential grants: the bus's events come from its serverId, peers (the
// spawner) trust a message by that from, and a peer's from is its
// clientId. Every peer learns the serverId from initialize and a
// cluster's is predictable, so the id alone is no secret; the prefix
// keeps a bus's next random serverId free too. A refusal is logged to
// log.
func (s *Server) checkReservedClientID(log *slog.Logger, id string) error {
	serverID := s.opts.ServerID
	reserved := strings.EqualFold(id, serverID) ||
		(len(id) >= len(serverIDPrefix) && strings.EqualFold(id[:len(serverIDPrefix)], serverIDPrefix))
	if !reserved {
		return nil
	}
	return s.refuse(log, refuseClientID, "", id, "reserved clientId",
		protocol.Errorf(protocol.ErrInvalidClientInfo, "clientId %q is reserved: the bus's own events come from its serverId %q, and ids starting with %q are kept for serverIds", id, serverID, serverIDPrefix))
}

// setAccessLocked records what the connection's credential is and
// allows, its own limits included (zero: the bus's). The caller holds
// c.mu.
func (c *conn) setAccessLocked(principal *auth.Principal, access *auth.Access) {
	c.principal, c.access, c.identity = principal, access, ""
	c.maxPending, c.rate, c.rateBurst = 0, 0, 0
	if c.expiry != nil {
		c.expiry.Stop()
		c.expiry = nil
	}
	if principal == nil {
		return
	}
	if exp := principal.Expires(); !exp.IsZero() && !c.closed {
		// A credential is cut when it expires, not at the next reload:
		// the check is the reload's own, against what is in force then,
		// once the token is past its exp and the skew allowance. A
		// runtime timer, not a goroutine, so an idle connection pays a
		// few dozen bytes for it. A closed connection arms none: a
		// reload's check may run after its cleanup.
		c.expiry = time.AfterFunc(expiryDelay(exp, time.Now()), func() {
			c.recheck(c.server.auth.Load())
		})
	}
	c.identity = principal.Name()
	c.maxPending = access.MaxPending()
	r := access.Rate()
	c.rate, c.rateBurst = r.PerSecond, r.Burst
}

// maxExpiryWait bounds the expiry timer's delay. A credential that
// expires later is checked when the timer fires, which arms it again
// for the time left; the sum below stays far from overflowing whatever
// exp a token carries (one past the year 2318 once made it negative, so
// the timer fired, re-armed and fired again without end).
const maxExpiryWait = 24 * time.Hour

// expiryDelay is how long after now a credential that expires at exp is
// checked: once it is past exp and the skew allowance, or after
// maxExpiryWait if that comes first.
func expiryDelay(exp, now time.Time) time.Duration {
	return min(exp.Sub(now), maxExpiryWait) + auth.ClockSkew + time.Second
}

// limitKeyLocked is whom the subscriber's publishes and retries count
// against for the pending caps: its credential's name, or on an open bus
// its clientId. The caller holds h.mu.
func (h *holding) limitKeyLocked() string {
	if h.identity != "" {
		return h.identity
	}
	return h.clientID
}

// refuse counts and logs a refusal and returns err, the answer to the
// peer. why is for the log only: it may say more than the peer is told.
func (c *conn) refuse(reason, identity, clientID, why string, err error) error {
	return c.server.refuse(c.log, reason, identity, clientID, why, err)
}

// refuse is conn's refuse, logged to log, for a refusal made before
// there is a connection to log it (Authorize).
func (s *Server) refuse(log *slog.Logger, reason, identity, clientID, why string, err error) error {
	s.metrics.authRefusals.WithLabelValues(reason).Inc()
	log.Warn("refused", "reason", reason, "identity", identity, "client", clientID, "detail", why, "answer", err)
	return err
}

// checkPublish refuses a publish the connection's credential (access,
// identity, as sendMessage read them) does not allow. The bus's own
// topics are refused with no auth configured too: observers, the spawner
// among them, trust what arrives there.
func (c *conn) checkPublish(access *auth.Access, identity, id, topic string) error {
	if protocol.BusOwnedTopic(topic) {
		return c.refuse(refuseBusTopic, identity, id, topic,
			protocol.Errorf(protocol.ErrForbidden, "%q is one of the bus's own topics; only the bus publishes there", topic))
	}
	if access != nil && !access.CanPublish(topic) {
		return c.refuse(refusePublish, identity, id, topic,
			protocol.Errorf(protocol.ErrForbidden, "credential %q may not publish to %q", identity, topic))
	}
	return nil
}

// checkSubscribe refuses a subscription the credential does not allow.
// The caller holds c.mu.
func (c *conn) checkSubscribe(p *protocol.Pattern, fallback bool) error {
	if c.access == nil {
		return nil
	}
	if !c.access.CanSubscribe(p) {
		return c.refuse(refuseSubscribe, c.identity, c.clientID, p.String(),
			protocol.Errorf(protocol.ErrForbidden, "credential %q may not subscribe to %q: its grants do not cover every topic the pattern matches", c.identity, p.String()))
	}
	if fallback && !c.access.Fallback() {
		return c.refuse(refuseFallback, c.identity, c.clientID, p.String(),
			protocol.Errorf(protocol.ErrForbidden, "credential %q may not hold a fallback subscription", c.identity))
	}
	return nil
}

// checkAdmin refuses the admin methods (Method.Admin) to a credential
// without admin.
func (c *conn) checkAdmin(method string) error {
	c.mu.Lock()
	access, identity, id := c.access, c.identity, c.clientID
	c.mu.Unlock()
	if access != nil && !access.Admin() {
		return c.refuse(refuseAdmin, identity, id, method,
			protocol.Errorf(protocol.ErrForbidden, "credential %q may not call %s: it needs admin", identity, method))
	}
	return nil
}

// SetAuth replaces the credentials and permissions in force (a reload):
// connections whose credential is no longer accepted are closed with
// protocol.CloseCredentialRevoked, those whose credential no longer
// allows their clientId or one of their subscriptions with
// protocol.ClosePermissionsChanged; the rest go on with their new
// permissions. Nil opens the bus.
func (s *Server) SetAuth(a *auth.Authenticator) {
	s.mu.Lock()
	s.auth.Store(a)
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	revoked, changed := 0, 0
	for _, c := range conns {
		switch c.recheck(a) {
		case closeRevoked:
			revoked++
		case closePermsChanged:
			changed++
		}
	}
	s.log.Info("credentials reloaded", "auth", a != nil, "connections", len(conns), "closed_revoked", revoked, "closed_permissions", changed)
}

// recheck applies a new Authenticator to the connection and returns the
// close reason, or "" when it goes on. A check against an Authenticator
// that a reload has replaced meanwhile (an expiry timer's, or a slow
// one) changes nothing: the reload checks the connection itself, and a
// stale check applied after it would undo what it decided.
func (c *conn) recheck(a *auth.Authenticator) string {
	c.mu.Lock()
	if c.closed || c.server.auth.Load() != a {
		// Going away already, or stale: nothing to check, no timer
		// to arm.
		c.mu.Unlock()
		return ""
	}
	if a == nil || !c.initialized {
		// Not initialized yet: initialize checks against what is in
		// force by then.
		c.setAccessLocked(nil, nil)
		c.mu.Unlock()
		return ""
	}
	cred, id, oldIdentity := c.cred, c.clientID, c.identity
	c.mu.Unlock()

	principal, err := c.server.authenticate(a, cred)
	if c.server.auth.Load() != a {
		return ""
	}
	if err != nil {
		c.log.Warn("closing connection: credential no longer accepted", "client", id, "identity", oldIdentity, "reason", err)
		c.close(websocket.StatusCode(protocol.CloseCredentialRevoked), closeRevoked)
		return closeRevoked
	}
	access := principal.Bind(id)
	c.mu.Lock()
	if c.server.auth.Load() != a {
		// Replaced since the check above: the reload that replaced
		// it applies its own, now or after this.
		c.mu.Unlock()
		return ""
	}
	why := ""
	switch {
	case !principal.AllowsClientID(id):
		why = "clientId " + id
	case access.PublishOnly() && !c.publishOnly:
		why = "publish-only credential"
	}
	for pattern, sub := range c.subs {
		if why != "" {
			break
		}
		if !access.CanSubscribe(sub.pattern) || (sub.fallback && !access.Fallback()) {
			why = "subscription " + pattern
		}
	}
	if why == "" {
		c.setAccessLocked(principal, access)
	}
	c.mu.Unlock()
	if why != "" {
		c.log.Warn("closing connection: permissions changed", "client", id, "identity", principal.Name(), "no_longer_allowed", why)
		c.close(websocket.StatusCode(protocol.ClosePermissionsChanged), closePermsChanged)
		return closePermsChanged
	}
	return ""
}
