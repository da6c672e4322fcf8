package spawner

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// safeName is what every workspace name must look like: one component of
// safe bytes, not hidden, ending in the hash.
var safeName = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9._-]*-[0-9a-f]{10}$`)

func TestWorkspaceName(t *testing.T) {
	tests := []struct {
		topic    string
		readable string // the name less its hash suffix
	}{
		{"tg:123", "tg_123"},
		{"agent:agent-3f2a", "agent_agent-3f2a"},
		{"tg:../../etc", "tg_.._.._etc"},
		{"../../etc/passwd", "_._.._etc_passwd"},
		{"..", "_."},
		{".", "_"},
		{".hidden", "_hidden"},
		{"/etc/passwd", "_etc_passwd"},
		{`tg:..\..\windows`, "tg_.._.._windows"},
		{"tg:a/b", "tg_a_b"},
		{"tg:\x00nul", "tg__nul"},
		{"tg:%2e%2e%2f", "tg__2e_2e_2f"},
		{"tg:чат", "tg_______"},
		{"", "topic"},
		{strings.Repeat("a", 1000), strings.Repeat("a", maxReadableName)},
	}
	seen := map[string]string{}
	for _, tt := range tests {
		name := WorkspaceName(tt.topic)
		if !safeName.MatchString(name) {
			t.Errorf("WorkspaceName(%q) = %q: not a safe name", tt.topic, name)
		}
		if readable := name[:len(name)-11]; readable != tt.readable {
			t.Errorf("WorkspaceName(%q) = %q: readable part %q, want %q", tt.topic, name, readable, tt.readable)
		}
		if filepath.Base(name) != name || name == "." || name == ".." {
			t.Errorf("WorkspaceName(%q) = %q: not a single path component", tt.topic, name)
		}
		root := "/srv/workspaces"
		if dir := filepath.Join(root, name); filepath.Dir(dir) != root {
			t.Errorf("WorkspaceName(%q) = %q leaves %s: %s", tt.topic, name, root, dir)
		}
		if other, dup := seen[name]; dup {
			t.Errorf("topics %q and %q share workspace %q", other, tt.topic, name)
		}
		seen[name] = tt.topic
	}
	// Topics whose readable parts collide still get their own workspace.
	if a, b := WorkspaceName("tg:1/2"), WorkspaceName("tg:1_2"); a == b {
		t.Errorf("tg:1/2 and tg:1_2 share %q", a)
	}
	// Stable: a restarted agent finds its workspace again.
	if WorkspaceName("tg:123") != WorkspaceName("tg:123") {
		t.Error("WorkspaceName is not deterministic")
	}
}

func FuzzWorkspaceName(f *testing.F) {
	for _, seed := range []string{"tg:123", "tg:../../etc", "..", "", "/", "a\\b"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, topic string) {
		name := WorkspaceName(topic)
		if !safeName.MatchString(name) || len(name) > maxReadableName+11 {
			t.Fatalf("WorkspaceName(%q) = %q", topic, name)
		}
	})
}

func TestWorkspaceDir(t *testing.T) {
	root := t.TempDir()
	dir, err := workspaceDir(root, "tg:../../etc")
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(dir) != root {
		t.Errorf("workspace %s is not directly under %s", dir, root)
	}
	if info, err := os.Stat(dir); err != nil || !info.IsDir() {
		t.Errorf("workspace %s not created: %v", dir, err)
	}
	// Again: the existing directory is reused.
	if again, err := workspaceDir(root, "tg:../../etc"); err != nil || again != dir {
		t.Errorf("second call: %q, %v; want %q", again, err, dir)
	}

	// A symlink planted where a workspace goes is refused, not followed.
	outside := t.TempDir()
	link := filepath.Join(root, WorkspaceName("tg:planted"))
	if err := os.Symlink(outside, link); err != nil {
		t.Skipf("cannot make a symlink here: %v", err)
	}
	if dir, err := workspaceDir(root, "tg:planted"); err == nil {
		t.Errorf("workspace through a symlink accepted: %s", dir)
	} else if !strings.Contains(err.Error(), "tg:planted") {
		t.Errorf("error %q does not name the topic", err)
	}
}
