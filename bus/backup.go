package bus

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/bub-bus/bub/bus/store"
)

// BackupPath is the HTTP endpoint that streams a consistent copy of the
// store (GET). bub backup calls it: the running bus holds the store's
// file lock, so only the bus can take the copy.
const BackupPath = "/backup"

// serveBackup streams the store's snapshot. The copy holds every
// message and payload the bus keeps, so it is guarded as the dlq.*
// methods are and more: with auth configured, only a credential with
// admin gets it (bearer token or client certificate, on this request);
// on an open bus, only a request from loopback whose Host names this bus
// (so a web page cannot read it through DNS rebinding). A request with
// an Origin header is always refused: browsers have no business here,
// and tools send none.
func (s *Server) serveBackup(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		http.Error(w, "bub-bus: "+BackupPath+" takes GET", http.StatusMethodNotAllowed)
		return
	}
	who, ok := s.authorizeBackup(w, r)
	if !ok {
		return
	}
	start := time.Now()
	var written int64
	err := s.store.Backup(func(snap store.Snapshot) error {
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
		s.log.Error("backup failed", "remote", r.RemoteAddr, "identity", who, "err", err)
		http.Error(w, "bub-bus: backup failed: "+err.Error(), http.StatusInternalServerError)
		return
	case err != nil:
		// Headers are gone: the short body is what tells the client.
		s.log.Error("backup cut short", "remote", r.RemoteAddr, "identity", who, "bytes", written, "err", err)
		return
	}
	s.log.Info("backup taken", "remote", r.RemoteAddr, "identity", who, "bytes", written, "duration", time.Since(start))
}

// authorizeBackup answers a request that may not have the backup and
// returns false; otherwise it returns the name to log for the caller.
func (s *Server) authorizeBackup(w http.ResponseWriter, r *http.Request) (string, bool) {
	if r.Header.Get("Origin") != "" {
		s.metrics.authRefusals.WithLabelValues(refuseHost).Inc()
		s.log.Warn("backup refused: request from a browser (Origin header)", "remote", r.RemoteAddr, "origin", r.Header.Get("Origin"))
		http.Error(w, "bub-bus: "+BackupPath+" is not for browsers", http.StatusForbidden)
		return "", false
	}
	a := s.auth.Load()
	if a == nil {
		if !remoteIsLoopback(r) || !s.hostAllowed(r) {
			s.metrics.authRefusals.WithLabelValues(refuseAdmin).Inc()
			s.log.Warn("backup refused: open bus, request not from loopback", "remote", r.RemoteAddr, "host", r.Host)
			http.Error(w, "bub-bus: with no auth configured, "+BackupPath+" is served to loopback only", http.StatusForbidden)
			return "", false
		}
		return "", true
	}
	var cred credential
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
		cred.certCN = r.TLS.VerifiedChains[0][0].Subject.CommonName
	}
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, token, _ := strings.Cut(h, " ")
		if strings.EqualFold(scheme, "Bearer") {
			cred.token = strings.TrimSpace(token)
		}
	}
	principal, err := s.authenticate(a, cred)
	if err != nil {
		s.metrics.authRefusals.WithLabelValues(refuseCredential).Inc()
		s.log.Warn("backup refused: credential not accepted", "remote", r.RemoteAddr, "reason", err)
		w.Header().Set("WWW-Authenticate", `Bearer realm="bub"`)
		http.Error(w, "bub-bus: "+BackupPath+" needs a credential with admin: "+httpUnauthorizedDetail, http.StatusUnauthorized)
		return "", false
	}
	// Admin does not depend on the clientId; no connection is made.
	if !principal.Bind("").Admin() {
		s.metrics.authRefusals.WithLabelValues(refuseAdmin).Inc()
		s.log.Warn("backup refused: credential has no admin", "remote", r.RemoteAddr, "identity", principal.Name())
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
