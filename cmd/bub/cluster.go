package main

import (
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/bub-bus/bub/cluster"
	"github.com/bub-bus/bub/internal/redact"
)

// clusterFlags are bub serve's cluster settings (docs/CLUSTER.md). With
// --cluster-name empty they must all be unset, and serve is the single
// node it has always been: bbolt, no NATS.
type clusterFlags struct {
	name          string
	nodeID        string
	clusterListen string
	routes        string
	clientListen  string
	url           string
	credsFile     string
	nodeTimeout   time.Duration
	syncTimeout   time.Duration
}

// defaultClusterListen is where an embedded NATS server takes routes
// when --nats-listen is not given: NATS's own cluster port. It is not
// the flag's default, since a single node listens on no NATS port.
const defaultClusterListen = ":6222"

// clusterFlagNames are the flags that mean nothing without
// --cluster-name.
var clusterFlagNames = []string{
	"node-id", "nats-listen", "nats-routes", "nats-client-listen", "nats-url", "nats-creds",
	"cluster-node-timeout", "cluster-sync-timeout",
}

func (c *clusterFlags) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.name, "cluster-name", "", "make this node one of a cluster of that name (docs/CLUSTER.md): state lives in NATS JetStream, not in the bbolt store; every node of one cluster gives the same name")
	fs.StringVar(&c.nodeID, "node-id", "", "this node's id in the cluster: 1 to 128 letters, digits, '-' and '_', unique and stable across restarts (its durable state is keyed by it); required with --cluster-name")
	fs.StringVar(&c.clusterListen, "nats-listen", "", "host:port the embedded NATS server takes the other nodes' routes on (with --cluster-name and no --nats-url: "+defaultClusterListen+")")
	fs.StringVar(&c.routes, "nats-routes", "", "comma-separated nats://host:port of every other node's --nats-listen; list them all, as JetStream sizes its quorum from the list")
	fs.StringVar(&c.clientListen, "nats-client-listen", "", "host:port the embedded NATS server takes NATS clients on, to inspect the cluster with the nats CLI (default: a free port on 127.0.0.1)")
	fs.StringVar(&c.url, "nats-url", "", "comma-separated URLs of an external NATS cluster with JetStream to use instead of embedding a server; excludes --nats-listen, --nats-routes and --nats-client-listen")
	fs.StringVar(&c.credsFile, "nats-creds", "", "NATS credentials file for --nats-url (its contents are never logged)")
	fs.DurationVar(&c.nodeTimeout, "cluster-node-timeout", 10*time.Second, "a node silent this long is presumed dead: its clients' subscriptions leave the order and another node takes over its retries and holds")
	fs.DurationVar(&c.syncTimeout, "cluster-sync-timeout", 2*time.Second, "how long a subscribe waits for every node to apply it before going on without a silent node")
}

// options checks the cluster flags of fs, once every layer is applied,
// against each other and returns the cluster's options, without a
// Logger, or nil for a single node. dataDir is --data-dir, under which
// the embedded server keeps JetStream's files.
func (c *clusterFlags) options(fs *flag.FlagSet, dataDir string) (*cluster.Options, error) {
	// Set anywhere (command line, environment, file) to other than its
	// default. A default given explicitly is no mistake: print-config
	// writes every key, and its output must load as a file again.
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = f.Value.String() != f.DefValue })
	if c.name == "" {
		for _, name := range clusterFlagNames {
			if set[name] {
				return nil, fmt.Errorf("--%s (or %s) is a cluster setting, but --cluster-name is not set", name, envName(name))
			}
		}
		return nil, nil
	}
	if c.nodeID == "" {
		return nil, errors.New("--cluster-name needs --node-id (or BUB_NODE_ID), this node's unique id in the cluster")
	}
	if c.nodeTimeout <= 0 || c.syncTimeout <= 0 {
		return nil, fmt.Errorf("--cluster-node-timeout %v and --cluster-sync-timeout %v: want positive durations", c.nodeTimeout, c.syncTimeout)
	}
	opts := &cluster.Options{
		Name:        c.name,
		NodeID:      c.nodeID,
		NodeTimeout: c.nodeTimeout,
		SyncTimeout: c.syncTimeout,
	}
	if c.url != "" {
		for _, name := range []string{"nats-listen", "nats-routes", "nats-client-listen"} {
			if set[name] {
				return nil, fmt.Errorf("--nats-url and --%s exclude each other: the nodes either use an external NATS cluster or embed their own", name)
			}
		}
		if c.credsFile != "" {
			// Checked here so that a wrong path is one clear line, not a
			// connection failure; only the path is ever shown.
			if _, err := os.Stat(c.credsFile); err != nil {
				return nil, fmt.Errorf("--nats-creds: %w", err)
			}
		}
		opts.URL, opts.CredsFile = c.url, c.credsFile
		return opts, nil
	}
	if c.credsFile != "" {
		return nil, errors.New("--nats-creds is for --nats-url; an embedded NATS server takes no credentials file")
	}
	routes := splitList(c.routes)
	for _, r := range routes {
		if err := checkRoute(r); err != nil {
			return nil, fmt.Errorf("--nats-routes: %w", err)
		}
	}
	opts.ClusterListen = c.clusterListen
	if opts.ClusterListen == "" {
		opts.ClusterListen = defaultClusterListen
	}
	opts.Routes = routes
	opts.ClientListen = c.clientListen
	opts.StoreDir = filepath.Join(dataDir, "nats")
	return opts, nil
}

// checkRoute accepts nats://host:port, the form the embedded server
// dials; anything else would only fail later, inside the server's logs.
func checkRoute(route string) error {
	u, err := redact.Parse(route)
	if err != nil {
		return fmt.Errorf("route %q: %w", redact.URL(route), err)
	}
	if u.Scheme != "nats" || u.Hostname() == "" || u.Port() == "" {
		return fmt.Errorf("route %q: want nats://host:port", redact.URL(route))
	}
	return nil
}

// redactURLs hides the passwords of a comma-separated URL list, for the
// logs and print-config: a NATS URL may carry user:password.
func redactURLs(list string) string {
	items := splitList(list)
	for i, item := range items {
		if u, err := url.Parse(item); err == nil && u.User != nil {
			items[i] = u.Redacted()
		}
	}
	return strings.Join(items, ",")
}

// clusterLogAttrs describe the node's cluster for the start-up line.
func clusterLogAttrs(o *cluster.Options) []any {
	attrs := []any{"cluster", o.Name, "node_id", o.NodeID}
	if o.URL != "" {
		return append(attrs, "nats_url", redactURLs(o.URL), "nats_creds", o.CredsFile)
	}
	return append(attrs, "nats_listen", o.ClusterListen, "nats_routes", strings.Join(o.Routes, ","), "nats_store", o.StoreDir)
}
