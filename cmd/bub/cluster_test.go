package main

import (
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus/bustest"
	"github.com/bub-bus/bub/cluster"
)

// clusterOptions runs serve's configuration layers as runServe does, the
// environment and args, then the file written from body ("" for none),
// and returns the cluster's options.
func clusterOptions(t *testing.T, body string, args ...string) (*cluster.Options, error) {
	t.Helper()
	if body != "" {
		path := writeFile(t, t.TempDir(), "bub.yaml", body)
		args = append([]string{"--config", path}, args...)
	}
	cfg, fs := newServeFlags(stdio{err: io.Discard})
	if _, ok := parseFlags(fs, stdio{err: io.Discard}, args); !ok {
		t.Fatalf("flags %q do not parse", args)
	}
	if err := cfg.applyFile(fs); err != nil {
		return nil, err
	}
	return cfg.cluster.options(fs, cfg.dataDir)
}

// TestClusterFlags: the cluster settings reach cluster.Options from the
// command line, the BUB_* environment and the file alike, with the
// embedded server's defaults and JetStream under DATA_DIR/nats.
func TestClusterFlags(t *testing.T) {
	dataDir := t.TempDir()
	creds := writeFile(t, t.TempDir(), "bus.creds", "not a real credential")
	tests := []struct {
		name string
		env  map[string]string
		file string
		args []string
		want *cluster.Options
	}{
		{name: "single node", args: []string{"--data-dir", dataDir}},
		{name: "single node, cluster settings at their defaults (print-config's output)", file: "cluster_name: \"\"\nnode_id: \"\"\ncluster_node_timeout: 10s\n"},
		{
			name: "flags, listen defaulted",
			args: []string{"--data-dir", dataDir, "--cluster-name", "prod", "--node-id", "b1", "--nats-routes", "nats://b2:6222, nats://b3:6222"},
			want: &cluster.Options{Name: "prod", NodeID: "b1", ClusterListen: ":6222", Routes: []string{"nats://b2:6222", "nats://b3:6222"},
				StoreDir: filepath.Join(dataDir, "nats"), NodeTimeout: 10 * time.Second, SyncTimeout: 2 * time.Second},
		},
		{
			name: "environment",
			env: map[string]string{"BUB_CLUSTER_NAME": "prod", "BUB_NODE_ID": "b2", "BUB_NATS_LISTEN": "0.0.0.0:7222",
				"BUB_NATS_ROUTES": "nats://b1:7222,nats://b3:7222", "BUB_NATS_CLIENT_LISTEN": "127.0.0.1:4333",
				"BUB_CLUSTER_NODE_TIMEOUT": "20s", "BUB_CLUSTER_SYNC_TIMEOUT": "3s", "BUB_DATA_DIR": dataDir},
			want: &cluster.Options{Name: "prod", NodeID: "b2", ClusterListen: "0.0.0.0:7222", Routes: []string{"nats://b1:7222", "nats://b3:7222"},
				ClientListen: "127.0.0.1:4333", StoreDir: filepath.Join(dataDir, "nats"), NodeTimeout: 20 * time.Second, SyncTimeout: 3 * time.Second},
		},
		{
			name: "file, routes as a list; a flag wins",
			file: "cluster_name: prod\nnode_id: b3\nnats_routes: [nats://b1:6222, nats://b2:6222]\ncluster_node_timeout: 15s\ndata_dir: " + dataDir + "\n",
			args: []string{"--node-id", "b9"},
			want: &cluster.Options{Name: "prod", NodeID: "b9", ClusterListen: ":6222", Routes: []string{"nats://b1:6222", "nats://b2:6222"},
				StoreDir: filepath.Join(dataDir, "nats"), NodeTimeout: 15 * time.Second, SyncTimeout: 2 * time.Second},
		},
		{
			name: "external NATS",
			args: []string{"--cluster-name", "prod", "--node-id", "b1", "--nats-url", "nats://n1:4222,nats://n2:4222", "--nats-creds", creds},
			want: &cluster.Options{Name: "prod", NodeID: "b1", URL: "nats://n1:4222,nats://n2:4222", CredsFile: creds,
				NodeTimeout: 10 * time.Second, SyncTimeout: 2 * time.Second},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			got, err := clusterOptions(t, tt.file, tt.args...)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

// TestClusterFlagErrors: inconsistent cluster settings are refused with
// an error naming the flags (and the variable, where one was used).
func TestClusterFlagErrors(t *testing.T) {
	node := []string{"--cluster-name", "prod", "--node-id", "b1"}
	tests := []struct {
		name string
		env  map[string]string
		file string
		args []string
		want []string
	}{
		{name: "routes without a cluster", args: []string{"--nats-routes", "nats://b2:6222"}, want: []string{"--nats-routes", "BUB_NATS_ROUTES", "--cluster-name is not set"}},
		{name: "node id from the environment without a cluster", env: map[string]string{"BUB_NODE_ID": "b1"}, want: []string{"--node-id", "BUB_NODE_ID", "--cluster-name"}},
		{name: "a timeout without a cluster", args: []string{"--cluster-node-timeout", "20s"}, want: []string{"--cluster-node-timeout", "--cluster-name"}},
		{name: "file key without a cluster", file: "nats_url: nats://n1:4222\n", want: []string{"--nats-url", "--cluster-name"}},
		{name: "no node id", args: []string{"--cluster-name", "prod"}, want: []string{"--node-id", "BUB_NODE_ID"}},
		{name: "routes and url", args: append(node, "--nats-routes", "nats://b2:6222", "--nats-url", "nats://n1:4222"), want: []string{"--nats-url", "--nats-routes", "exclude"}},
		{name: "listen and url", args: append(node, "--nats-listen", ":6222", "--nats-url", "nats://n1:4222"), want: []string{"--nats-url", "--nats-listen"}},
		{name: "client listen and url", args: append(node, "--nats-client-listen", ":4222", "--nats-url", "nats://n1:4222"), want: []string{"--nats-url", "--nats-client-listen"}},
		{name: "creds without url", args: append(node, "--nats-creds", "x.creds"), want: []string{"--nats-creds", "--nats-url"}},
		{name: "creds file missing", args: append(node, "--nats-url", "nats://n1:4222", "--nats-creds", "/nonexistent/x.creds"), want: []string{"--nats-creds", "/nonexistent/x.creds"}},
		{name: "route without scheme", args: append(node, "--nats-routes", "b2:6222"), want: []string{"--nats-routes", `"b2:6222"`, "nats://host:port"}},
		{name: "route without port", args: append(node, "--nats-routes", "nats://b2"), want: []string{"--nats-routes", "nats://host:port"}},
		{name: "zero node timeout", args: append(node, "--cluster-node-timeout", "0s"), want: []string{"--cluster-node-timeout", "positive"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			got, err := clusterOptions(t, tt.file, tt.args...)
			require.Error(t, err, "options %+v", got)
			for _, want := range tt.want {
				assert.Contains(t, err.Error(), want)
			}
		})
	}
}

// TestServeRefusesClusterFlagsAlone: bub serve itself refuses a cluster
// flag without --cluster-name in one line, before it opens any store.
func TestServeRefusesClusterFlagsAlone(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "data")
	code, _, stderr := runBub(t, "", "serve", "--data-dir", dataDir, "--nats-routes", "nats://b2:6222")
	assert.Equal(t, 2, code)
	oneLine(t, stderr, "--nats-routes (or BUB_NATS_ROUTES) is a cluster setting, but --cluster-name is not set")
	assert.NoDirExists(t, dataDir, "a refused serve created its data directory")
}

// TestServeHelpExplainsClusterFlags: --help names each cluster flag with
// its variable and the defaults that apply.
func TestServeHelpExplainsClusterFlags(t *testing.T) {
	code, help, _ := runBub(t, "", "serve", "--help")
	require.Equal(t, 0, code)
	for _, want := range []string{
		"--cluster-name (env BUB_CLUSTER_NAME)",
		"--node-id (env BUB_NODE_ID)",
		"--nats-listen (env BUB_NATS_LISTEN)",
		"with --cluster-name and no --nats-url: :6222",
		"--nats-routes (env BUB_NATS_ROUTES)",
		"--nats-client-listen (env BUB_NATS_CLIENT_LISTEN)",
		"--nats-url (env BUB_NATS_URL)",
		"--nats-creds (env BUB_NATS_CREDS)",
		`--cluster-node-timeout (env BUB_CLUSTER_NODE_TIMEOUT, default "10s")`,
		`--cluster-sync-timeout (env BUB_CLUSTER_SYNC_TIMEOUT, default "2s")`,
	} {
		assert.Contains(t, help, want)
	}
}

// TestPrintConfigRedactsNATSPassword: a NATS URL's password is a secret
// print-config does not show.
func TestPrintConfigRedactsNATSPassword(t *testing.T) {
	code, out, stderr := runBub(t, "", "serve", "--print-config", "--cluster-name", "prod", "--node-id", "b1",
		"--nats-url", "nats://bus:s3cret-pass@n1:4222,nats://n2:4222")
	require.Equal(t, 0, code, stderr)
	assert.NotContains(t, out, "s3cret-pass")
	assert.Contains(t, out, "nats://bus:xxxxx@n1:4222")
	assert.Contains(t, out, "nats://n2:4222")
}

// TestBackupOfStorelessBus: a bus with no store file answers /backup
// with 501, and bub backup says why in one line, writing nothing: a bus
// in memory says so; a cluster node, whose state is in JetStream, says
// how a cluster is backed up instead (it used to say that its store was
// in memory).
func TestBackupOfStorelessBus(t *testing.T) {
	memory := bustest.Start(t, nil)
	node := startBus(t, t.TempDir(), "--cluster-name", "t", "--node-id", "a", "--nats-listen", freeAddr(t))
	for _, tt := range []struct {
		name, url string
		want      []string
		not       string
	}{
		{"in memory", memory.URL, []string{"the store is in memory"}, "cluster"},
		{"cluster node", node.url, []string{"NATS JetStream", "DATA_DIR/nats while that node is stopped", "nats stream backup", "KV_BUB_PENDING", "docs/CLUSTER.md"}, "in memory"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "copy.db")
			_, stderr, code := bub(t, []string{"BUB_BUS_URL=" + tt.url}, "", "backup", file)
			assert.Equal(t, 1, code)
			oneLine(t, stderr, "501 Not Implemented")
			for _, want := range tt.want {
				assert.Contains(t, stderr, want)
			}
			assert.NotContains(t, stderr, tt.not)
			assert.NoFileExists(t, file)
			assert.False(t, strings.Contains(stderr, "partial"), stderr)
		})
	}
}
