package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/coder/websocket/wsjson"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/protocol"
)

// testCert is a certificate and its key, PEM-encoded.
type testCert struct {
	cert    *x509.Certificate
	certPEM []byte
	keyPEM  []byte
	tls     tls.Certificate
}

// newTestCert makes a certificate for 127.0.0.1 and localhost, signed by
// parent (self-signed when parent is nil), usable as a CA as well.
func newTestCert(t *testing.T, cn string, parent *testCert) *testCert {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:              []string{"localhost"},
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	signer, signerKey := tmpl, any(key)
	if parent != nil {
		signer, signerKey = parent.cert, parent.tls.PrivateKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	c := &testCert{
		cert:    cert,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}
	c.tls, err = tls.X509KeyPair(c.certPEM, c.keyPEM)
	require.NoError(t, err)
	return c
}

// install writes the certificate and key to certFile and keyFile, each
// replaced whole (write, then rename) as an operator's tooling does.
func (c *testCert) install(t *testing.T, certFile, keyFile string) {
	t.Helper()
	for file, body := range map[string][]byte{certFile: c.certPEM, keyFile: c.keyPEM} {
		tmp := file + ".new"
		require.NoError(t, os.WriteFile(tmp, body, 0o600))
		require.NoError(t, os.Rename(tmp, file))
	}
}

// startServe runs bub serve with args on a free loopback port and waits
// until /readyz answers over client (scheme "http" or "https").
func startServe(t *testing.T, scheme string, client *http.Client, args ...string) (*daemon, string) {
	t.Helper()
	addr := freeAddr(t)
	args = append([]string{"serve", "--listen", addr, "--data-dir", t.TempDir()}, args...)
	d := &daemon{cmd: exec.Command(bubBinary, args...), http: scheme + "://" + addr, stderr: &lockedBuffer{}}
	d.cmd.Stderr = d.stderr
	require.NoError(t, d.cmd.Start())
	t.Cleanup(func() {
		d.kill()
		if strings.Contains(d.stderr.String(), "DATA RACE") {
			t.Errorf("the race detector fired in bub serve:\n%s", d.stderr)
		}
	})
	require.Eventually(t, func() bool {
		resp, err := client.Get(d.http + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 20*time.Second, 20*time.Millisecond, "bub serve to answer /readyz")
	return d, addr
}

// trusting is an HTTPS client that trusts roots and presents clientCert
// when given one.
func trusting(clientCert *testCert, roots ...*testCert) *http.Client {
	pool := x509.NewCertPool()
	for _, r := range roots {
		pool.AddCert(r.cert)
	}
	cfg := &tls.Config{RootCAs: pool}
	if clientCert != nil {
		// Always present it: with Certificates the client would send
		// only one the server's CA list names, and hide the stranger.
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return &clientCert.tls, nil
		}
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
}

// servedSerial is the serial number of the certificate addr presents.
func servedSerial(t *testing.T, addr string, roots ...*testCert) (*big.Int, error) {
	t.Helper()
	pool := x509.NewCertPool()
	for _, r := range roots {
		pool.AddCert(r.cert)
	}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{RootCAs: pool})
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber, nil
}

// TestServeTLS: with --tls-cert and --tls-key the one listener serves
// wss:// and HTTPS, and a SIGHUP makes new handshakes get the
// certificate now in the files.
func TestServeTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "bus.crt"), filepath.Join(dir, "bus.key")
	first := newTestCert(t, "bus one", nil)
	first.install(t, certFile, keyFile)
	second := newTestCert(t, "bus two", nil)
	client := trusting(nil, first, second)

	d, addr := startServe(t, "https", client, "--tls-cert", certFile, "--tls-key", keyFile)
	assert.Contains(t, d.stderr.String(), `url=wss://`+addr+`/`, "the log gives the wss:// URL")

	resp, err := client.Get(d.http + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	// Go's TLS server answers a plain HTTP request with a 400.
	if resp, err := http.Get("http://" + addr + "/healthz"); err == nil {
		resp.Body.Close()
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "plain HTTP is not served beside TLS")
	}

	// A WebSocket peer over wss:// trusting the certificate.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "wss://"+addr+"/", &websocket.DialOptions{HTTPClient: client})
	require.NoError(t, err)
	defer ws.CloseNow()
	require.NoError(t, wsjson.Write(ctx, ws, map[string]any{"jsonrpc": "2.0", "id": 1, "method": protocol.MethodInitialize, "params": protocol.InitializeParams{ClientID: "tls-peer"}}))
	var answer struct {
		Result *protocol.InitializeResult `json:"result"`
		Error  json.RawMessage            `json:"error"`
	}
	require.NoError(t, wsjson.Read(ctx, ws, &answer))
	require.NotNil(t, answer.Result, "initialize over wss:// answered %s", answer.Error)
	assert.NotEmpty(t, answer.Result.ServerID)

	serial, err := servedSerial(t, addr, first, second)
	require.NoError(t, err)
	require.Equal(t, first.cert.SerialNumber, serial)

	second.install(t, certFile, keyFile)
	require.NoError(t, d.cmd.Process.Signal(syscall.SIGHUP))
	require.Eventually(t, func() bool {
		serial, err := servedSerial(t, addr, first, second)
		return err == nil && serial.Cmp(second.cert.SerialNumber) == 0
	}, 20*time.Second, 20*time.Millisecond, "the new certificate after SIGHUP")
	// The new certificate is served before the reload is logged.
	require.Eventually(t, func() bool { return strings.Contains(d.stderr.String(), "configuration reloaded") }, 20*time.Second, 20*time.Millisecond, "the reload's log line")
	// The open connection keeps working on the certificate it shook
	// hands with.
	require.NoError(t, wsjson.Write(ctx, ws, map[string]any{"jsonrpc": "2.0", "id": 2, "method": protocol.MethodPing}))
	require.NoError(t, wsjson.Read(ctx, ws, &answer))

	// A reload whose key no longer matches changes nothing.
	require.NoError(t, os.WriteFile(keyFile, first.keyPEM, 0o600))
	require.NoError(t, d.cmd.Process.Signal(syscall.SIGHUP))
	require.Eventually(t, func() bool {
		return strings.Contains(d.stderr.String(), "configuration reload failed; nothing changed")
	}, 20*time.Second, 20*time.Millisecond, "the failed reload to be logged")
	serial, err = servedSerial(t, addr, first, second)
	require.NoError(t, err)
	assert.Equal(t, second.cert.SerialNumber, serial)
	// The peer answers the bus's close at shutdown, as a real one does:
	// one that reads nothing holds the stop for the 5 s close timeout.
	ws.CloseRead(ctx)
	d.stop(t)
}

// TestServeMutualTLS: with --tls-client-ca a peer may present a
// certificate signed by that CA, one without a certificate still
// connects (a token peer), and one signed by anyone else is refused in
// the handshake.
func TestServeMutualTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	server := newTestCert(t, "bus", nil)
	certFile, keyFile := filepath.Join(dir, "bus.crt"), filepath.Join(dir, "bus.key")
	server.install(t, certFile, keyFile)
	ca := newTestCert(t, "client ca", nil)
	caFile := writeFile(t, dir, "ca.crt", string(ca.certPEM))
	reader := newTestCert(t, "reader", ca)
	stranger := newTestCert(t, "reader", nil)

	d, _ := startServe(t, "https", trusting(nil, server), "--tls-cert", certFile, "--tls-key", keyFile, "--tls-client-ca", caFile)
	for name, tt := range map[string]struct {
		cert *testCert
		ok   bool
	}{
		"certificate from the CA":    {reader, true},
		"no certificate":             {nil, true},
		"certificate from elsewhere": {stranger, false},
	} {
		resp, err := trusting(tt.cert, server).Get(d.http + "/healthz")
		if tt.ok {
			if assert.NoError(t, err, name) {
				resp.Body.Close()
				assert.Equal(t, http.StatusOK, resp.StatusCode, name)
			}
		} else {
			assert.Error(t, err, name)
		}
	}
}

// TestServeTLSFlagsGoTogether: a key without a certificate is refused
// at start, naming both flags.
func TestServeTLSFlagsGoTogether(t *testing.T) {
	code, _, stderr := runBub(t, "", "serve", "--tls-key", "x.key", "--data-dir", t.TempDir())
	assert.Equal(t, 1, code)
	oneLine(t, stderr, "--tls-cert and --tls-key go together")
}

// TestServeReloadInvalidFile: a SIGHUP with a broken file logs where it
// is broken at Error level and leaves the bus serving as before.
func TestServeReloadInvalidFile(t *testing.T) {
	t.Parallel()
	path := writeFile(t, t.TempDir(), "bub.yaml", "limits:\n  max_subscriptions: 100\n")
	d, _ := startServe(t, "http", http.DefaultClient, "--config", path, "--log-format", "json")

	writeFile(t, filepath.Dir(path), "bub.yaml", "limits:\n  max_subscriptions: 100\n  max_subscribtions: 5\n")
	require.NoError(t, d.cmd.Process.Signal(syscall.SIGHUP))
	var logged map[string]any
	require.Eventually(t, func() bool {
		for _, line := range strings.Split(d.stderr.String(), "\n") {
			if strings.Contains(line, "configuration reload failed") {
				return json.Unmarshal([]byte(line), &logged) == nil
			}
		}
		return false
	}, 20*time.Second, 20*time.Millisecond, "the failed reload to be logged")
	assert.Equal(t, "ERROR", logged["level"])
	assert.Contains(t, logged["err"], path+`:3: unknown key "max_subscribtions" in limits`)
	assert.NotContains(t, d.stderr.String(), "configuration reloaded")

	resp, err := http.Get(d.http + "/readyz")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)

	// Settings a reload cannot apply are named, and the rest is applied.
	writeFile(t, filepath.Dir(path), "bub.yaml", "delivery_timeout: 3s\nlimits:\n  max_subscriptions: 100\n")
	require.NoError(t, d.cmd.Process.Signal(syscall.SIGHUP))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("bub serve logged:\n%s", d.stderr.String())
		}
	})
	require.Eventually(t, func() bool {
		return strings.Contains(d.stderr.String(), `"msg":"configuration reloaded"`)
	}, 20*time.Second, 20*time.Millisecond, "the reload to be logged")
	assert.Contains(t, d.stderr.String(), `"msg":"changed settings take effect only after a restart","keys":["delivery_timeout"]`)
	d.stop(t)
}

// TestServeOpenBusAllInterfaces: --allow-anonymous lets an open bus
// listen on every interface, with the warning.
func TestServeOpenBusAllInterfaces(t *testing.T) {
	t.Parallel()
	_, port, err := net.SplitHostPort(freeAddr(t))
	require.NoError(t, err)
	cmd := exec.Command(bubBinary, "serve", "--listen", "0.0.0.0:"+port, "--allow-anonymous", "--data-dir", t.TempDir())
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())
	d := &daemon{cmd: cmd, stderr: stderr}
	t.Cleanup(d.kill)
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://127.0.0.1:" + port + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 20*time.Second, 20*time.Millisecond, "bub serve on 0.0.0.0 to answer")
	assert.Contains(t, stderr.String(), "no auth configured: any peer may act as any clientId; see docs/SECURITY.md")
	d.stop(t)
}

// TestServeReloadAuthAndLimits is the end-to-end test of loadAuth and of
// a reload that applies.
func TestServeReloadAuthAndLimits(t *testing.T) {
	t.Parallel()
	token := "reload-test-token"
	identity := func(name string) string {
		sum := sha256.Sum256([]byte(token + "-" + name))
		return "    - name: " + name + "\n      token_sha256: " + hex.EncodeToString(sum[:]) + "\n      client_ids: [\"" + name + "\"]\n      publish: {allow: [\"x:*\"]}\n"
	}
	dir := t.TempDir()
	path := writeFile(t, dir, "bub.yaml", "auth:\n  identities:\n"+identity("one"))
	d, _ := startServe(t, "http", http.DefaultClient, "--config", path)
	assert.Contains(t, d.stderr.String(), `msg="auth configured"`)
	assert.Contains(t, d.stderr.String(), "identities=1")
	assert.NotContains(t, d.stderr.String(), "no auth configured")

	writeFile(t, dir, "bub.yaml", "limits: {max_subscriptions: 5}\nauth:\n  identities:\n"+identity("one")+identity("two"))
	require.NoError(t, d.cmd.Process.Signal(syscall.SIGHUP))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("bub serve logged:\n%s", d.stderr.String())
		}
	})
	require.Eventually(t, func() bool {
		return strings.Contains(d.stderr.String(), `msg="configuration reloaded"`)
	}, 20*time.Second, 20*time.Millisecond, "the reload to be logged")
	assert.Contains(t, d.stderr.String(), "identities=2 issuers=0")
	assert.Contains(t, d.stderr.String(), "limits_changed=true")
	assert.NotContains(t, d.stderr.String(), token, "the token is never logged")

	// An auth section auth.New refuses (a key file that is not there)
	// changes nothing, and the error names the file and the section.
	writeFile(t, dir, "bub.yaml", "auth:\n  issuers:\n    - {name: s, public_key_file: absent.pub}\n")
	require.NoError(t, d.cmd.Process.Signal(syscall.SIGHUP))
	require.Eventually(t, func() bool {
		return strings.Contains(d.stderr.String(), "configuration reload failed")
	}, 20*time.Second, 20*time.Millisecond, "the failed reload to be logged")
	assert.Contains(t, d.stderr.String(), path+":1: auth:")
	d.stop(t)
}

// TestServeCountsConnectionsFromAccept: bub serve counts every accepted
// connection against the connection limits, so idle sockets from one
// address cannot crowd it out unseen: /healthz is refused at once
// meanwhile, not left to time out, and answered again once they are gone,
// whether their peer hangs up or the handshake timeout closes them.
//
// Each wait is on an event, not on the handshake timeout's length: the
// refusal is checked under a timeout no run reaches (the test once held
// its connections for 3 s, then 8, and a loaded box's first /healthz
// still came after the bus had closed them), and the timeout's work is
// seen where it happens, at each socket, which reads EOF when the bus
// closes it.
func TestServeCountsConnectionsFromAccept(t *testing.T) {
	t.Parallel()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	// healthz answers /healthz's status and body; 0 when it fails.
	healthz := func(addr string) (int, string) {
		resp, err := client.Get("http://" + addr + "/healthz")
		if err != nil {
			return 0, ""
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	idle := func(addr string) []net.Conn {
		var conns []net.Conn
		for range 3 {
			c, err := net.DialTimeout("tcp", addr, 10*time.Second)
			require.NoError(t, err)
			t.Cleanup(func() { _ = c.Close() })
			conns = append(conns, c)
		}
		return conns
	}
	refused := func(addr string) {
		require.Eventually(t, func() bool {
			code, body := healthz(addr)
			return code == http.StatusServiceUnavailable && strings.Contains(body, "max_connections_per_addr 3")
		}, 20*time.Second, 20*time.Millisecond, "a 4th connection refused")
	}
	answered := func(addr, why string) {
		require.Eventually(t, func() bool {
			code, _ := healthz(addr)
			return code == http.StatusOK
		}, 20*time.Second, 20*time.Millisecond, why)
	}

	// startServe's /readyz goes from another loopback address: the bus
	// closes that connection, and gives its place back, a moment after
	// it answers, and once that moment came after the test's three idle
	// connections, the third was refused in its stead and every /healthz
	// after it admitted (the test failed so under a full CI run).
	ready := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext:       (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}).DialContext,
	}}
	_, addr := startServe(t, "http", ready, "--max-connections-per-addr", "3", "--handshake-timeout", "10m")
	conns := idle(addr)
	refused(addr)
	for _, c := range conns {
		require.NoError(t, c.Close())
	}
	answered(addr, "the idle connections' places freed when their peer hung up")

	_, addr = startServe(t, "http", ready, "--max-connections-per-addr", "3", "--handshake-timeout", "1s")
	for i, c := range idle(addr) {
		// The bus closes the socket: the read ends (EOF, or a reset),
		// well within the read's bound.
		require.NoError(t, c.SetReadDeadline(time.Now().Add(30*time.Second)))
		n, err := c.Read(make([]byte, 1))
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("idle connection %d still open 30 s after the 1 s handshake timeout", i)
		}
		if n != 0 || err == nil {
			t.Fatalf("idle connection %d: read %d bytes, %v; want it closed by the bus", i, n, err)
		}
	}
	answered(addr, "the idle connections' places freed after the handshake timeout closed them")
}
