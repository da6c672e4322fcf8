package admin

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/store"
)

// serveBackup streams the store's snapshot. The copy holds every
// message and payload the bus keeps, so it is guarded as the dlq.*
// methods are and more: with auth configured, only a credential with
// admin gets it (bearer token or client certificate, on this request);
// on an open bus, only a request from loopback whose Host names this bus
// (so a web page cannot read it through DNS rebinding). A request with
// an Origin header is always refused: browsers have no business here,
// and tools send none.
func (a *admin) serveBackup(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		http.Error(w, "bub-bus: "+BackupPath+" takes GET", http.StatusMethodNotAllowed)
		return
	}
	who, ok := a.authorizeBackup(w, r)
	if !ok {
		return
	}
	log := a.s.Options().Logger
	start := time.Now()
	var written int64
	err := a.s.Backup(func(snap store.Snapshot) error {
		// The length lets the client tell a complete copy from one cut
		// short by a dropped connection.
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.FormatInt(snap.Size(), 10))
		w.Header().Set("Content-Disposition", `attachment; filename="`+store.FileName+`"`)
		var err error
		written, err = snap.WriteTo(w)
		return err
	})
	switch {
	case errors.Is(err, store.ErrNoFile):
		http.Error(w, "bub-bus: backup: "+err.Error(), http.StatusNotImplemented)
		return
	case err != nil && written == 0:
		log.Error("backup failed", "remote", r.RemoteAddr, "identity", who, "err", err)
		http.Error(w, "bub-bus: backup failed: "+err.Error(), http.StatusInternalServerError)
		return
	case err != nil:
		// Headers are gone: the short body is what tells the client.
		log.Error("backup cut short", "remote", r.RemoteAddr, "identity", who, "bytes", written, "err", err)
		return
	}
	log.Info("backup taken", "remote", r.RemoteAddr, "identity", who, "bytes", written, "duration", time.Since(start))
}

// authorizeBackup answers a request that may not have the backup and
// returns false; otherwise it returns the name to log for the caller.
func (a *admin) authorizeBackup(w http.ResponseWriter, r *http.Request) (string, bool) {
	s, log := a.s, a.s.Options().Logger
	if r.Header.Get("Origin") != "" {
		s.RefusedBrowser()
		log.Warn("backup refused: request from a browser (Origin header)", "remote", r.RemoteAddr, "origin", r.Header.Get("Origin"))
		http.Error(w, "bub-bus: "+BackupPath+" is not for browsers", http.StatusForbidden)
		return "", false
	}
	// A header of another scheme than Bearer carries no token: the
	// request is refused below as one with a credential not accepted,
	// not for its header, as it always was here.
	var token string
	if scheme, t, _ := strings.Cut(r.Header.Get("Authorization"), " "); strings.EqualFold(scheme, "Bearer") {
		token = strings.TrimSpace(t)
	}
	principal, err := s.Verify(bus.CredentialOf(r, token))
	if err != nil {
		log.Warn("backup refused: credential not accepted", "remote", r.RemoteAddr, "reason", err)
		w.Header().Set("WWW-Authenticate", `Bearer realm="bub"`)
		http.Error(w, "bub-bus: "+BackupPath+" needs a credential with admin: "+bus.HTTPUnauthorized, http.StatusUnauthorized)
		return "", false
	}
	if principal == nil {
		// An open bus.
		if !remoteIsLoopback(r) || !s.HostAllowed(r) {
			s.RefusedAdmin()
			log.Warn("backup refused: open bus, request not from loopback", "remote", r.RemoteAddr, "host", r.Host)
			http.Error(w, "bub-bus: with no auth configured, "+BackupPath+" is served to loopback only", http.StatusForbidden)
			return "", false
		}
		return "", true
	}
	// Admin does not depend on the clientId; no connection is made.
	if !principal.Bind("").Admin() {
		s.RefusedAdmin()
		log.Warn("backup refused: credential has no admin", "remote", r.RemoteAddr, "identity", principal.Name())
		http.Error(w, fmt.Sprintf("bub-bus: credential %q may not take a backup: it needs admin", principal.Name()), http.StatusForbidden)
		return "", false
	}
	return principal.Name(), true
}

// remoteIsLoopback reports whether r came from this host.
func remoteIsLoopback(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
