package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/bub-bus/bub/bus/store"
	"github.com/bub-bus/bub/protocol"
)

// TestServeRefusesDamagedStore runs bub serve on damaged copies of a store
// of 100 dead letters: each must exit non-zero at once with one line that
// names the file and the way to recover, instead of starting empty, on an
// older state, or to crash on the first dlq.list.
func TestServeRefusesDamagedStore(t *testing.T) {
	t.Parallel()
	const pageSize = 4096
	src := t.TempDir()
	st, err := store.Open(src, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		d := &store.DeadLetter{
			Message: store.Message{ID: fmt.Sprint("m-", i), Topic: "jobs:x", From: "pub", Payload: []byte(`{"type":"job"}`), PublishedAt: time.Now()},
			Reason:  protocol.ReasonMaxRetries, DeadAt: time.Now(),
		}
		if _, err := st.DeadLetter("", d); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	clean, err := os.ReadFile(filepath.Join(src, store.FileName))
	if err != nil {
		t.Fatal(err)
	}
	// The file is larger than what it holds (bbolt grows it ahead of
	// use): a cut must fall inside the pages in use to damage anything.
	used := usedBytes(t, filepath.Join(src, store.FileName))

	damages := map[string]func([]byte) []byte{
		"empty":             func([]byte) []byte { return nil },
		"cut in half":       func(d []byte) []byte { return d[:used/2] },
		"16 KB":             func(d []byte) []byte { return d[:16*1024] },
		"first page zeroed": func(d []byte) []byte { copy(d, make([]byte, pageSize)); return d },
		"second meta page zeroed": func(d []byte) []byte {
			copy(d[pageSize:], make([]byte, pageSize))
			return d
		},
		// Inside the records only, where bbolt checks nothing: the
		// records' checksums catch them.
		"a payload byte changed": func(d []byte) []byte { return bytes.ReplaceAll(d, []byte(`"type":"job"`), []byte(`"type":"jab"`)) },
		"a from byte changed":    func(d []byte) []byte { return bytes.ReplaceAll(d, []byte(`"from":"pub"`), []byte(`"from":"pwb"`)) },
		"data pages overwritten": func(d []byte) []byte {
			for i := 2 * pageSize; i < len(d); i++ {
				d[i] = byte(i * 7)
			}
			return d
		},
	}
	for name, damage := range damages {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, store.FileName)
			if err := os.WriteFile(path, damage(append([]byte(nil), clean...)), 0o600); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bubBinary, "serve", "--listen", freeAddr(t), "--data-dir", dir)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			if ctx.Err() != nil {
				t.Fatalf("bub serve started on a damaged store: %s", &stderr)
			}
			exit, ok := err.(*exec.ExitError)
			if !ok || exit.ExitCode() != 1 {
				t.Fatalf("bub serve: want exit status 1, got %v: %s", err, &stderr)
			}
			out := strings.TrimSuffix(stderr.String(), "\n")
			if strings.Contains(out, "\n") {
				t.Errorf("want one line, got:\n%s", out)
			}
			for _, want := range []string{"bub serve: open store " + path + ": not a bub store, or corrupt: ", "restore bub.db from a backup"} {
				if !strings.Contains(out, want) {
					t.Errorf("want %q in: %s", want, out)
				}
			}
			if name == "16 KB" {
				sameAsDamagedStoreDoc(t, out, path)
			}
			if strings.Contains(out, "jab") || strings.Contains(out, "pwb") {
				t.Errorf("the error shows a record's bytes: %s", out)
			}
			t.Log(out)
		})
	}

	t.Run("intact copy serves", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, store.FileName), clean, 0o600); err != nil {
			t.Fatal(err)
		}
		d := startBus(t, dir)
		stdout, stderr, code := bub(t, []string{"BUB_BUS_URL=" + d.url}, "", "dlq", "list", "--limit", "1000")
		if code != 0 || strings.Count(stdout, "jobs:x") != 100 {
			t.Errorf("dlq list on the intact copy: exit %d, %d entries: %s", code, strings.Count(stdout, "jobs:x"), stderr)
		}
		d.stop(t)
	})
}

// usedBytes returns how much of the bbolt file at path its pages in use
// take: the size a transaction sees, not the file's.
func usedBytes(t *testing.T, path string) int {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var size int64
	if err := db.View(func(tx *bolt.Tx) error { size = tx.Size(); return nil }); err != nil {
		t.Fatal(err)
	}
	return int(size)
}

// sameAsDamagedStoreDoc checks that docs/PROTOCOL.md's example of a
// damaged store, a file cut to 16 KB in data/, reads as bub serve's
// message for such a file at path, numbers aside (they depend on what
// the store held).
func sameAsDamagedStoreDoc(t *testing.T, got, path string) {
	t.Helper()
	doc, err := os.ReadFile("../../docs/PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(doc), "#### A damaged store\n")
	_, example, _ := strings.Cut(section, "```\n")
	example, _, _ = strings.Cut(example, "\n```")
	numbers := regexp.MustCompile(`[0-9]+`)
	want := numbers.ReplaceAllString(strings.ReplaceAll(example, "data/bub.db", path), "N")
	if g := numbers.ReplaceAllString(got, "N"); g != want {
		t.Errorf("PROTOCOL.md's damaged-store example differs from bub serve's message:\n doc: %s\n bub: %s", example, got)
	}
}
