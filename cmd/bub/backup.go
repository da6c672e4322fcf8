package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/bub-bus/bub/bus/admin"
	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/peer"
)

func init() {
	register("backup", "copy the running bus's store to a file, consistently, while it runs", runBackup)
}

// runBackup fetches the store's snapshot from the running bus, which
// holds the file's lock, through its /backup endpoint (bus/admin):
// copying bub.db with cp while the bus writes it could catch a page
// half-written, and the snapshot cannot.
func runBackup(ctx context.Context, std stdio, args []string) int {
	var (
		busURL  string
		cred    credentialFlags
		force   bool
		timeout time.Duration
	)
	fs := newFlagSet(std, "backup FILE [flags]", "backup FILE [flags]\n\n"+
		"Copies the running bus's store to FILE (- for standard output): a consistent snapshot\n"+
		"taken while the bus runs, a bub.db file that a stopped bus's --data-dir can take back.\n"+
		"With auth on, the credential needs admin; on an open bus, only loopback may take one.")
	fs.StringVar(&busURL, "bus-url", peer.DefaultBusURL, busURLUsage+"; the backup is fetched over HTTP(S) from the same address")
	bindEnv(fs, "bus-url")
	cred.addFlags(fs)
	fs.BoolVar(&force, "force", false, "replace FILE if it exists")
	fs.DurationVar(&timeout, "timeout", 10*time.Minute, "how long the whole copy may take")
	file, code, ok := parseInterleaved(fs, std, args)
	if !ok {
		return code
	}
	if len(file) != 1 {
		return usagef(std, "backup", "give one FILE to write the copy to (or - for standard output)")
	}
	if err := checkBusURL(busURL); err != nil {
		return usagef(std, "backup", "%v", err)
	}
	var endpoints []string
	for _, u := range busURLs(busURL) {
		endpoint, err := backupURL(u)
		if err != nil {
			return usagef(std, "backup", "%v", err)
		}
		endpoints = append(endpoints, endpoint)
	}
	token, err := cred.resolve()
	if err != nil {
		return usagef(std, "backup", "%v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if file[0] == "-" {
		if _, err := fetchBackup(ctx, endpoints, token, std.out); err != nil {
			return errorf(std, "%v", err)
		}
		return 0
	}
	n, err := writeBackup(ctx, endpoints, token, file[0], force)
	if err != nil {
		return errorf(std, "%v", err)
	}
	fmt.Fprintf(std.out, "wrote %s: %d bytes, the store as of %s\n", file[0], n, time.Now().UTC().Format(time.RFC3339))
	return 0
}

// backupURL is the bus's /backup endpoint, at the address of its
// WebSocket URL: ws:// becomes http://, wss:// https://.
func backupURL(busURL string) (string, error) {
	return busHTTPURL(busURL, admin.BackupPath)
}

// writeBackup writes the copy to path through a temporary file in the
// same directory, synced and renamed into place only once complete, so
// that path never holds part of a copy.
func writeBackup(ctx context.Context, endpoints []string, token, path string, force bool) (int64, error) {
	if _, err := os.Lstat(path); err == nil && !force {
		return 0, fmt.Errorf("%s exists; pass --force to replace it", path)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".partial-*")
	if err != nil {
		return 0, fmt.Errorf("create a temporary file next to %s: %w", path, err)
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	n, err := fetchBackup(ctx, endpoints, token, tmp)
	if err != nil {
		return 0, err
	}
	if err := tmp.Sync(); err != nil {
		return 0, fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return 0, fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	// A record damaged in the bus's file is copied as it is, and restore
	// would refuse the copy: better to learn it now than then.
	if err := store.Check(tmp.Name()); err != nil {
		return 0, fmt.Errorf("the copy fails the store's checks, so the bus's store is damaged; nothing written to %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return 0, fmt.Errorf("rename %s to %s: %w", tmp.Name(), path, err)
	}
	done = true
	// The rename survives a crash only once the directory is synced.
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return n, nil
}

// fetchBackup GETs the copy from the first of endpoints that answers
// (several nodes' addresses, in --bus-url's order) and writes it to w,
// checking that it arrived whole: the bus announces its length.
func fetchBackup(ctx context.Context, endpoints []string, token string, w io.Writer) (int64, error) {
	var (
		endpoint string
		resp     *http.Response
		err      error
	)
	// Only a request that got no answer moves on: nothing is written to
	// w yet, and the next node may be up.
	for _, endpoint = range endpoints {
		var req *http.Request
		req, err = http.NewRequestWithContext(ctx, http.MethodGet, endpoint, nil)
		if err != nil {
			return 0, err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err = http.DefaultClient.Do(req)
		if err == nil || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return 0, fmt.Errorf("%s: %w", endpoint, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		msg := strings.TrimPrefix(strings.TrimSpace(string(body)), "bub-bus: ")
		switch resp.StatusCode {
		case http.StatusUnauthorized:
			msg += "; check --token, --token-file or BUB_TOKEN"
		case http.StatusNotFound:
			msg = "the bus has no " + admin.BackupPath + " endpoint; is it an older bub serve?"
		}
		return 0, fmt.Errorf("%s: %s: %s", endpoint, resp.Status, msg)
	}
	n, err := io.Copy(w, resp.Body)
	if err != nil {
		return n, fmt.Errorf("%s: copy cut short after %d bytes: %w", endpoint, n, err)
	}
	if resp.ContentLength >= 0 && n != resp.ContentLength {
		return n, fmt.Errorf("%s: copy cut short: %d of %d bytes", endpoint, n, resp.ContentLength)
	}
	return n, nil
}
