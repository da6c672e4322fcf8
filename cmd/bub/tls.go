package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
)

// tlsFiles are the files that make serve speak wss:// and HTTPS.
type tlsFiles struct {
	cert, key, clientCA string
}

func (f tlsFiles) enabled() bool { return f.cert != "" || f.key != "" || f.clientCA != "" }

// load reads the files into a server tls.Config.
func (f tlsFiles) load() (*tls.Config, error) {
	if f.cert == "" || f.key == "" {
		return nil, errors.New("tls: --tls-cert and --tls-key go together (--tls-client-ca needs both)")
	}
	cert, err := tls.LoadX509KeyPair(f.cert, f.key)
	if err != nil {
		return nil, fmt.Errorf("tls: load --tls-cert %s and --tls-key %s: %w", f.cert, f.key, err)
	}
	cfg := &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   tls.VersionTLS12,
		// HTTP/1.1 only: a WebSocket upgrade needs it, and offering h2
		// would let browsers pool the bus's connections onto HTTP/2.
		NextProtos: []string{"http/1.1"},
	}
	if f.clientCA != "" {
		pem, err := os.ReadFile(f.clientCA)
		if err != nil {
			return nil, fmt.Errorf("tls: --tls-client-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls: --tls-client-ca %s: no PEM certificate in it", f.clientCA)
		}
		cfg.ClientCAs = pool
		// IfGiven, not Require: peers that authenticate with a token and
		// no certificate must still connect over the same listener.
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
	}
	return cfg, nil
}

// certStore holds the TLS configuration in force; a SIGHUP swaps it
// without touching open connections, which keep the one they shook
// hands with.
type certStore struct {
	current atomic.Pointer[tls.Config]
}

func newCertStore(f tlsFiles) (*certStore, error) {
	cfg, err := f.load()
	if err != nil {
		return nil, err
	}
	s := &certStore{}
	s.current.Store(cfg)
	return s, nil
}

// listenerConfig is the tls.Config for the listener. It hands every
// handshake the current configuration through GetConfigForClient rather
// than only GetCertificate, so that a reload replaces the client CA as
// well as the certificate.
func (s *certStore) listenerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return s.current.Load(), nil
		},
	}
}
