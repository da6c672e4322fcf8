package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"

	"github.com/bub-bus/bub/a2a"
	"github.com/bub-bus/bub/auth"
	"github.com/bub-bus/bub/bus"
	"github.com/bub-bus/bub/cluster"
)

// addA2AFlags adds bub serve's A2A setting.
func (c *serveConfig) addA2AFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.a2aConfig, "a2a-config", "", "YAML file of the agents to serve over A2A 1.0 at /a2a/{agent}/ (docs/A2A.md); default: A2A off")
}

// a2aFile is the --a2a-config file.
type a2aFile struct {
	// BusURL is the bus's own WebSocket URL, which the A2A server dials
	// as a peer. Default: ws:// and the listen address; required with
	// --tls-cert, where the certificate names the host to dial.
	BusURL string `yaml:"bus_url"`
	// PublicURL is what the cards give as the agents' URL, up to
	// /a2a/. Default: the scheme and Host of the request for the card.
	PublicURL string `yaml:"public_url"`
	// Store is the task store's file. Default: DATA_DIR/a2a.db. A
	// cluster node keeps its tasks in JetStream instead.
	Store string `yaml:"store"`
	// Retention is how long a task and its idempotency key are kept
	// after their last change. Default: 24h.
	Retention time.Duration `yaml:"retention"`
	// IdempotencyHeaderOnly: only the Idempotency-Key header marks a
	// retry, not a repeated messageId. Default: false.
	IdempotencyHeaderOnly bool `yaml:"idempotency_header_only"`
	// BlockTimeout bounds a blocking SendMessage's wait, against the
	// specification's MUST wait. Default: none.
	BlockTimeout time.Duration `yaml:"block_timeout"`
	// MaxEventsPerTask bounds a task's event log. Default: 10000.
	MaxEventsPerTask int         `yaml:"max_events_per_task"`
	Agents           []a2a.Agent `yaml:"agents"`
}

// loadA2AConfig reads the --a2a-config file at path into the A2A
// server's options. Relative paths in it are relative to the file.
// Errors name the file and, where YAML gives one, the line.
func loadA2AConfig(path, dataDir string) (*a2a.Options, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--a2a-config: %w", err)
	}
	return parseA2AConfig(path, data, dataDir)
}

// parseA2AConfig is loadA2AConfig on the file's contents.
func parseA2AConfig(path string, data []byte, dataDir string) (*a2a.Options, error) {
	var f a2aFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: empty; it needs agents:", path)
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	dir := filepath.Dir(path)
	rel := func(p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(dir, p)
	}
	o := &a2a.Options{BusURL: f.BusURL, PublicURL: strings.TrimSuffix(f.PublicURL, "/"), Path: rel(f.Store),
		Retention: f.Retention, IdempotencyHeaderOnly: f.IdempotencyHeaderOnly, BlockTimeout: f.BlockTimeout, MaxEventsPerTask: f.MaxEventsPerTask, Agents: f.Agents}
	if o.Path == "" {
		o.Path = filepath.Join(dataDir, "a2a.db")
	}
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for i := range o.Agents {
		a := &o.Agents[i]
		if a.TokenFile == "" {
			continue
		}
		var err error
		if a.Token, err = readSecret("", rel(a.TokenFile), "", fmt.Sprintf("%s: agent %q: token_file", path, a.Name)); err != nil {
			return nil, err
		}
	}
	return o, nil
}

// a2aDoor is the A2A server mounted at /a2a/ beside the bus's handler.
// It is mounted before the listener serves and started once it does,
// since the A2A server dials the bus; until then /a2a/ answers 503.
type a2aDoor struct {
	opts *a2a.Options
	// hosts are the Host values an open bus's door answers (lower
	// case): see hostAllowed.
	hosts map[string]bool
	srv   atomic.Pointer[a2a.Server]
	// authn is the bus's authenticator in force, which a SIGHUP
	// replaces (setAuth); nil on an open bus.
	authn atomic.Pointer[auth.Authenticator]
}

// newA2ADoor loads the --a2a-config file; nil without --a2a-config.
// It runs before the bus starts, so that a bad file stops bub serve
// before anything is served. node is the cluster node's id, "" on a
// single node.
func newA2ADoor(cfg *serveConfig, node string, authn *auth.Authenticator, log *slog.Logger) (*a2aDoor, error) {
	if cfg.a2aConfig == "" {
		return nil, nil
	}
	opts, err := loadA2AConfig(cfg.a2aConfig, cfg.dataDir)
	if err != nil {
		return nil, err
	}
	// On a cluster the tasks are in JetStream (start), and the server
	// acts as each client_id with the node's id after it.
	opts.Node = node
	if opts.BusURL == "" && cfg.tlsFiles().enabled() {
		return nil, fmt.Errorf("%s: bus_url is required with --tls-cert: the wss:// URL, with the name the certificate gives, that the A2A server dials", cfg.a2aConfig)
	}
	opts.Logger = log
	d := &a2aDoor{opts: opts, hosts: map[string]bool{}}
	for _, h := range splitList(cfg.hosts) {
		d.hosts[strings.ToLower(h)] = true
	}
	d.authn.Store(authn)
	// Always set, even on an open bus: a SIGHUP may add an auth:
	// section, and the A2A door must then want credentials at once.
	opts.Caller = d.caller
	opts.Secured = func() bool { return d.authn.Load() != nil }
	return d, nil
}

// setAuth puts a reloaded authenticator in force. Safe on nil.
func (d *a2aDoor) setAuth(authn *auth.Authenticator) {
	if d != nil {
		d.authn.Store(authn)
	}
}

// mount routes /a2a/ of hs to the door, the rest to hs's handler as it
// was.
func (d *a2aDoor) mount(hs *http.Server) {
	if d == nil {
		return
	}
	bus := hs.Handler
	// A web page the user visits must not call agents from the browser
	// with the user's ambient access (an open bus on loopback).
	door := http.NewCrossOriginProtection().Handler(d)
	hs.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/a2a/") {
			door.ServeHTTP(w, r)
			return
		}
		bus.ServeHTTP(w, r)
	})
}

func (d *a2aDoor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if d.authn.Load() == nil && !d.hostAllowed(r) {
		http.Error(w, fmt.Sprintf("Host %q is not an address of this bus; an operator adds it with --hosts", r.Host), http.StatusForbidden)
		return
	}
	srv := d.srv.Load()
	if srv == nil {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "the A2A server is starting", http.StatusServiceUnavailable)
		return
	}
	srv.ServeHTTP(w, r)
}

// hostAllowed reports whether r's Host names this bus, on an open bus
// where no credential guards the door: a web page that rebinds its own
// name to 127.0.0.1 (DNS rebinding) passes the browser's cross-origin
// checks, and only the Host it must send gives it away. The names are
// those the bus's WebSocket door accepts: the address the request came
// to, a loopback name on that port, and --hosts.
func (d *a2aDoor) hostAllowed(r *http.Request) bool {
	host := strings.ToLower(r.Host)
	name, port, err := net.SplitHostPort(host)
	if err != nil {
		name = host
	}
	if d.hosts[host] || d.hosts[name] {
		return true
	}
	local, ok := r.Context().Value(http.LocalAddrContextKey).(*net.TCPAddr)
	if !ok || port != strconv.Itoa(local.Port) {
		return false
	}
	ip := net.ParseIP(strings.Trim(name, "[]"))
	return ip != nil && ip.Equal(local.IP) || local.IP.IsLoopback() && (name == "localhost" || ip != nil && ip.IsLoopback())
}

// start connects the A2A server to the bus listening on addr; its
// metrics join the bus's in reg. On a cluster (cl not nil) its tasks
// are in the cluster's JetStream, shared by every node's A2A server.
func (d *a2aDoor) start(ctx context.Context, addr net.Addr, reg prometheus.Registerer, cl bus.Cluster, log *slog.Logger) error {
	if d == nil {
		return nil
	}
	d.opts.Registerer = reg
	store := d.opts.Path
	if cl != nil {
		cs := cluster.StoreOf(cl)
		if cs == nil {
			return errors.New("a2a: the cluster has no store yet")
		}
		d.opts.JetStream, d.opts.Replicas = cs.JetStream()
		store = "JetStream stream BUB_A2A"
		if err := awaitReady(ctx, cl, log); err != nil {
			return err
		}
	}
	if d.opts.BusURL == "" {
		d.opts.BusURL = "ws://" + dialable(addr) + "/"
	}
	srv, err := a2a.New(ctx, d.opts)
	if err != nil {
		return err
	}
	d.srv.Store(srv)
	names := make([]string, 0, len(d.opts.Agents))
	for _, a := range d.opts.Agents {
		names = append(names, a.Name)
	}
	log.Info("A2A serving", "agents", strings.Join(names, ","), "store", store, "catalog", "/a2a/.well-known/agent-cards.json")
	return nil
}

// readyWait bounds how long the A2A server waits for its cluster node to
// be ready, as a node's start waits for JetStream.
const readyWait = time.Minute

// awaitReady waits until the cluster node is ready (its /readyz): just
// after it joined, it may not have heard the others' heartbeats yet, and
// takes itself for a minority, where the A2A server's first act, the
// claim of its clientId, is refused ("no quorum").
func awaitReady(ctx context.Context, cl bus.Cluster, log *slog.Logger) error {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	deadline := time.Now().Add(readyWait)
	said := false
	for {
		err := cl.Ready()
		switch {
		case err == nil:
			return nil
		case time.Now().After(deadline):
			return fmt.Errorf("a2a: the cluster node is not ready after %v: %w", readyWait, err)
		case !said:
			log.Info("A2A waits for the cluster node to be ready", "err", err)
			said = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// close stops the A2A server: its streams end and its bus connections
// close. Safe on nil and twice.
func (d *a2aDoor) close() {
	if d == nil {
		return
	}
	if srv := d.srv.Swap(nil); srv != nil {
		srv.Close()
	}
}

// dialable is addr with an unspecified IP (0.0.0.0, ::) made loopback.
func dialable(addr net.Addr) string {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok || !tcp.IP.IsUnspecified() {
		return addr.String()
	}
	return net.JoinHostPort("127.0.0.1", fmt.Sprint(tcp.Port))
}

// caller authenticates an A2A request with the bus's credentials in
// force: a bearer token (an identity's token or a JWT; none for the
// anonymous identity, if auth: has one), whose grants must allow
// publishing on the agent's topic. It names the caller as the bus's
// logs do; the caller owns the tasks it creates. On an open bus every
// request is the caller "".
func (d *a2aDoor) caller(r *http.Request, agent *a2a.Agent) (string, error) {
	authn := d.authn.Load()
	if authn == nil {
		return "", nil
	}
	var token string
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, value, _ := strings.Cut(h, " ")
		if !strings.EqualFold(scheme, "Bearer") {
			return "", fmt.Errorf("%w: Authorization must be Bearer and a credential of the bus", a2a.ErrUnauthenticated)
		}
		token = strings.TrimSpace(value)
	}
	p, err := authn.Authenticate(token, time.Now())
	if err != nil {
		return "", fmt.Errorf("%w: %v", a2a.ErrUnauthenticated, err)
	}
	if !p.Bind(p.Name()).CanPublish(agent.Topic) {
		return "", fmt.Errorf("identity %q may not call agent %q: its grants do not allow publishing on %s", p.Name(), agent.Name, agent.Topic)
	}
	return p.Name(), nil
}
