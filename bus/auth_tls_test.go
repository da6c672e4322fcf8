package bus_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/bub-bus/bub/auth"
	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/protocol"
)

// issue returns a certificate for cn signed by parent (self-signed when
// parent is nil), with its key.
func issue(t *testing.T, cn string, parent *tls.Certificate) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, BasicConstraintsValid: true, IsCA: parent == nil,
	}
	signer, signerKey := tmpl, any(key)
	if parent != nil {
		signer, signerKey = parent.Leaf, parent.PrivateKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}

// TestClientCertificateIdentity: over mutual TLS, a verified client
// certificate whose subject is an identity's cert_subject acts as that
// identity; a verified one that names no identity is no credential.
func TestClientCertificateIdentity(t *testing.T) {
	dir := t.TempDir()
	cfg, _ := authConfig(t, dir)
	cfg.Identities = append(cfg.Identities, auth.Identity{Name: "cert-reader", CertSubject: "reader.example", Grant: auth.Grant{
		ClientIDs: []string{"researcher-2"}, Subscribe: auth.Rules{Allow: []string{"agent:{{clientId}}"}},
	}})
	a, err := auth.New(cfg, dir)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := bus.New(&bus.Options{Auth: a, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ca := issue(t, "client ca", nil)
	pool := x509.NewCertPool()
	pool.AddCert(ca.Leaf)
	hs := httptest.NewUnstartedServer(srv)
	hs.TLS = &tls.Config{ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: pool}
	hs.StartTLS()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
		defer cancel()
		_ = srv.Shutdown(ctx)
		hs.Close()
	})
	url := "wss" + strings.TrimPrefix(hs.URL, "https") + "/"

	initializeWith := func(cert *tls.Certificate, clientID string) int64 {
		t.Helper()
		tr := hs.Client().Transport.(*http.Transport).Clone()
		if cert != nil {
			tr.TLSClientConfig.Certificates = []tls.Certificate{*cert}
		}
		ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
		defer cancel()
		ws, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPClient: &http.Client{Transport: tr}})
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		defer ws.CloseNow()
		if err := ws.Write(ctx, websocket.MessageText, []byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"clientId":"`+clientID+`"}}`)); err != nil {
			t.Fatal(err)
		}
		_, data, err := ws.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(data), `"error"`) {
			return 0
		}
		for _, c := range []int64{protocol.CodeUnauthorized, protocol.CodeForbidden} {
			if strings.Contains(string(data), `"code":`+itoa(c)) {
				return c
			}
		}
		t.Fatalf("initialize answered %s", data)
		return -1
	}
	reader := issue(t, "reader.example", &ca)
	nobody := issue(t, "nobody.example", &ca)
	if got := initializeWith(&reader, "researcher-2"); got != 0 {
		t.Errorf("the certificate's identity: %d, want success", got)
	}
	if got := initializeWith(&reader, "main"); got != protocol.CodeForbidden {
		t.Errorf("the certificate's identity as main: %d, want forbidden", got)
	}
	if got := initializeWith(&nobody, "researcher-2"); got != protocol.CodeUnauthorized {
		t.Errorf("a certificate naming no identity: %d, want unauthorized", got)
	}
	if got := initializeWith(nil, "researcher-2"); got != protocol.CodeUnauthorized {
		t.Errorf("no certificate, no token: %d, want unauthorized", got)
	}
}
