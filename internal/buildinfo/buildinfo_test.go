package buildinfo

import "testing"

// TestStamped: a version set at link time (make image's -ldflags -X) is
// the one reported, not the toolchain's "dev".
func TestStamped(t *testing.T) {
	stamped = "v1.2.3-4-gabcdef"
	if got := Version(); got != "v1.2.3-4-gabcdef" {
		t.Fatalf("Version() = %q, want the stamped version", got)
	}
}
