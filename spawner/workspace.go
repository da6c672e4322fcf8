package spawner

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// maxReadableName bounds the readable part of a workspace name, so a
// 1 KiB topic cannot make a name longer than file systems allow (255
// bytes on most).
const maxReadableName = 64

// WorkspaceName returns the directory name of topic's workspace: one path
// component, safe on any file system, and the same for the same topic on
// every run, so a restarted agent finds its files again.
//
// The name is the topic with every byte outside [A-Za-z0-9._-] replaced by
// '_' (a leading '.' too, so no name is hidden or "." or ".."), cut to 64
// bytes, then '-' and 10 hex digits of the topic's SHA-256. The hash keeps
// names distinct where the readable part is not: "tg:1/2" and "tg:1_2"
// both read "tg_1_2" but get different suffixes. "tg:123" becomes
// "tg_123-" and its hash; "tg:../../etc" becomes "tg_.._.._etc-" and its
// hash, a plain name that cannot leave the workspace root.
func WorkspaceName(topic string) string {
	var b strings.Builder
	for i := 0; i < len(topic) && b.Len() < maxReadableName; i++ {
		c := topic[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
			b.WriteByte(c)
		case c == '.' && b.Len() > 0:
			b.WriteByte(c)
		default:
			b.WriteByte('_')
		}
	}
	readable := b.String()
	if readable == "" {
		readable = "topic"
	}
	sum := sha256.Sum256([]byte(topic))
	return readable + "-" + hex.EncodeToString(sum[:5])
}

// workspaceDir creates (if needed) and returns the workspace of topic
// under root, an absolute path. It refuses a name that would not be a
// plain directory directly under root, such as a symlink planted there, so
// an agent is never pointed outside root.
func workspaceDir(root, topic string) (string, error) {
	name := WorkspaceName(topic)
	dir := filepath.Join(root, name)
	// WorkspaceName cannot produce a separator or a dot name; this check
	// keeps that promise if the function is ever changed.
	if filepath.Dir(dir) != filepath.Clean(root) || name == "." || name == ".." {
		return "", fmt.Errorf("workspace for topic %q: name %q is not a single path component", topic, name)
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("workspace for topic %q: %w", topic, err)
	}
	info, err := os.Lstat(dir)
	if err != nil {
		return "", fmt.Errorf("workspace for topic %q: %w", topic, err)
	}
	if !info.IsDir() {
		return "", fmt.Errorf("workspace for topic %q: %s exists and is not a directory (%s)", topic, dir, info.Mode().Type())
	}
	return dir, nil
}
