package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/peer"
)

// busHolding starts a bus on a data directory of its own that holds one
// message for topic, a task_request with taskID, and returns the
// directory and the environment that reaches the bus.
func busHolding(t *testing.T, topic, taskID string) (dataDir string, env []string) {
	t.Helper()
	dataDir = t.TempDir()
	d := startBus(t, dataDir)
	env = []string{"BUB_BUS_URL=" + d.url}
	out, errOut, code := bub(t, env, "", "send-message", "--topic", topic, "--payload", `{"type":"task_request","task_id":"`+taskID+`"}`)
	require.Equal(t, 0, code, "send-message: %s%s", out, errOut)
	require.Contains(t, out, `"held":true`)
	return dataDir, env
}

// TestBackupRestore: bub backup copies a running bus's store, and a bus
// started on the copy delivers what the original held.
func TestBackupRestore(t *testing.T) {
	t.Parallel()
	dataDir, env := busHolding(t, "agent:ghost-b", "t-9")
	file := filepath.Join(t.TempDir(), "bub-backup.db")
	out, errOut, code := bub(t, env, "", "backup", file)
	require.Equal(t, 0, code, "backup: %s", errOut)
	assert.Contains(t, out, "wrote "+file)
	// An existing file is not replaced by mistake.
	_, errOut, code = bub(t, env, "", "backup", file)
	assert.Equal(t, 1, code)
	oneLine(t, errOut, "exists; pass --force")
	_, errOut, code = bub(t, env, "", "backup", "--force", file)
	assert.Equal(t, 0, code, errOut)
	left, err := filepath.Glob(filepath.Join(filepath.Dir(file), ".*partial*"))
	require.NoError(t, err)
	assert.Empty(t, left, "temporary files left behind")

	// Restore into a data directory, from standard input as in a
	// container; a bus started on it has what the original held.
	restored := t.TempDir()
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	out, errOut, code = bub(t, []string{"BUB_DATA_DIR=" + restored}, string(data), "restore", "-")
	require.Equal(t, 0, code, "restore: %s", errOut)
	assert.Contains(t, out, "restored - into "+filepath.Join(restored, store.FileName))
	// The running original's store is not replaced under it.
	_, errOut, code = bub(t, nil, "", "restore", "--data-dir", dataDir, file)
	assert.Equal(t, 1, code)
	oneLine(t, errOut, "stop the bus first")
	r := startBus(t, restored)
	got := make(chan string, 1)
	conn, err := peer.Dial(t.Context(), r.url, &peer.Options{ClientID: "ghost-b", Logger: quietLogger})
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.Subscribe(t.Context(), "agent:ghost-b", func(_ context.Context, dl *peer.Delivery) (peer.Result, error) {
		got <- string(dl.Payload)
		return peer.Result{Processed: true}, nil
	}, nil))
	select {
	case p := <-got:
		assert.Contains(t, p, `"task_id":"t-9"`)
	case <-time.After(10 * time.Second):
		t.Fatal("the bus on the restored copy did not deliver the held message")
	}
}

// TestBackupRefusesDamagedStore: a record damaged in the running bus's
// file (the bus has not read it since) is copied as it is; bub backup
// checks the copy as Open would, and refuses it, naming the record,
// rather than write a backup that restore would refuse later.
func TestBackupRefusesDamagedStore(t *testing.T) {
	t.Parallel()
	dataDir, env := busHolding(t, "agent:ghost-d", "t-damaged")
	path := filepath.Join(dataDir, store.FileName)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	require.NoError(t, err)
	found := 0
	for i := 0; ; found++ {
		j := strings.Index(string(data[i:]), "t-damaged")
		if j < 0 {
			break
		}
		_, err = f.WriteAt([]byte("T"), int64(i+j))
		require.NoError(t, err)
		i += j + 1
	}
	require.NoError(t, f.Close())
	require.Positive(t, found)

	file := filepath.Join(t.TempDir(), "bub-backup.db")
	_, errOut, code := bub(t, env, "", "backup", file)
	assert.Equal(t, 1, code)
	oneLine(t, errOut, "the copy fails the store's checks, so the bus's store is damaged; nothing written to "+file)
	assert.Contains(t, errOut, "pending record p-000000000001: the record fails its CRC-32C checksum")
	assert.NotContains(t, errOut, "T-damaged")
	assert.NoFileExists(t, file)
	left, err := filepath.Glob(filepath.Join(filepath.Dir(file), ".*partial*"))
	require.NoError(t, err)
	assert.Empty(t, left, "temporary files left behind")
}

// TestBackupNeedsAdmin: with auth on, only a credential with admin gets a
// copy, and refusals say why without repeating the token.
func TestBackupNeedsAdmin(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	config := filepath.Join(dir, "bus.yaml")
	const opsToken, peerToken = "ops-token-0123456789abcdef", "peer-token-0123456789abcdef"
	require.NoError(t, os.WriteFile(config, []byte(`auth:
  identities:
    - name: ops
      token_sha256: "`+sha256Hex(opsToken)+`"
      client_ids: ["cli-*"]
      admin: true
    - name: peer
      token_sha256: "`+sha256Hex(peerToken)+`"
      client_ids: ["cli-*"]
      publish: {allow: ["inbound:*"]}
`), 0o600))
	d := startBus(t, filepath.Join(dir, "data"), "--config", config)
	file := filepath.Join(dir, "copy.db")
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{nil, "401 Unauthorized"},
		{[]string{"BUB_TOKEN=wrong-" + opsToken}, "401 Unauthorized"},
		{[]string{"BUB_TOKEN=" + peerToken}, `credential "peer" may not take a backup: it needs admin`},
	} {
		_, errOut, code := bub(t, append([]string{"BUB_BUS_URL=" + d.url}, tc.env...), "", "backup", file)
		assert.Equal(t, 1, code)
		oneLine(t, errOut, tc.want)
		assert.NotContains(t, errOut, opsToken)
		assert.NotContains(t, errOut, peerToken)
		_, err := os.Stat(file)
		assert.True(t, os.IsNotExist(err), "a refused backup left %s", file)
	}
	_, errOut, code := bub(t, []string{"BUB_BUS_URL=" + d.url, "BUB_TOKEN=" + opsToken}, "", "backup", file)
	assert.Equal(t, 0, code, errOut)
	info, err := os.Stat(file)
	require.NoError(t, err)
	assert.Positive(t, info.Size())
	assert.False(t, strings.Contains(d.stderr.String(), opsToken), "the bus logged the token")
}

func TestBackupURL(t *testing.T) {
	for in, want := range map[string]string{
		"ws://127.0.0.1:7892/":       "http://127.0.0.1:7892/backup",
		"ws://bus:7892":              "http://bus:7892/backup",
		"wss://bus.example/bub/":     "https://bus.example/bub/backup",
		"wss://bus.example:443/?x=1": "https://bus.example:443/backup",
	} {
		got, err := backupURL(in)
		require.NoError(t, err)
		assert.Equal(t, want, got, in)
	}
	code, _, stderr := runCLI(t.Context(), "", "backup")
	assert.Equal(t, 2, code)
	oneLine(t, stderr, "give one FILE")
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// TestRestoreNamesTheBadFile: a file that is no store is refused naming
// the user's file, not the temporary copy, and without the advice to
// restore from a backup that bub serve gives for a damaged store.
func TestRestoreNamesTheBadFile(t *testing.T) {
	t.Parallel()
	bad := writeFile(t, t.TempDir(), "backup.db", "not a store at all, but long enough to look like one")
	dataDir := t.TempDir()
	_, stderr, code := bub(t, nil, "", "restore", "--data-dir", dataDir, bad)
	assert.Equal(t, 1, code)
	oneLine(t, stderr, "bub restore "+bad+" into "+filepath.Join(dataDir, store.FileName)+": "+bad+" is not a usable bub store, nothing changed: ")
	assert.NotContains(t, stderr, ".restore-")
	assert.NotContains(t, stderr, "from a backup")
}
