package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestEnvBinding: a BUB_* variable sets its flag, the command line wins
// over it, and a bad value names the variable.
func TestEnvBinding(t *testing.T) {
	tests := []struct {
		name    string
		env     string
		args    []string
		want    time.Duration
		wantErr string
	}{
		{"default", "", nil, time.Second, ""},
		{"from the environment", "5s", nil, 5 * time.Second, ""},
		{"command line wins", "5s", []string{"--delivery-timeout", "7s"}, 7 * time.Second, ""},
		{"bad value names the variable", "soon", nil, 0, "BUB_DELIVERY_TIMEOUT"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.env != "" {
				t.Setenv("BUB_DELIVERY_TIMEOUT", tt.env)
			}
			var errOut bytes.Buffer
			std := stdio{out: &bytes.Buffer{}, err: &errOut}
			fs := newFlagSet(std, "test", "test")
			d := fs.Duration("delivery-timeout", time.Second, "")
			code, ok := parseFlags(fs, std, tt.args)
			if tt.wantErr != "" {
				if ok || code == 0 || !strings.Contains(errOut.String(), tt.wantErr) {
					t.Fatalf("ok %v, code %d, stderr %q", ok, code, errOut.String())
				}
				return
			}
			if !ok || *d != tt.want {
				t.Fatalf("ok %v, value %s, want %s (stderr %q)", ok, *d, tt.want, errOut.String())
			}
		})
	}
}

// TestHelpNamesEveryVariable: every command's --help lists each flag with
// its BUB_* variable.
func TestHelpNamesEveryVariable(t *testing.T) {
	for name := range commands {
		args := []string{name, "--help"}
		if name == "dlq" {
			args = []string{name, "list", "--help"}
		}
		if name == "bcp" {
			args = []string{name, "validate", "--help"}
		}
		var out, errOut bytes.Buffer
		run(t.Context(), stdio{in: strings.NewReader(""), out: &out, err: &errOut}, args)
		flags := 0
		for _, line := range strings.Split(errOut.String()+out.String(), "\n") {
			line = strings.TrimSpace(line)
			if !strings.HasPrefix(line, "--") {
				continue
			}
			flags++
			flag, _, _ := strings.Cut(strings.TrimPrefix(line, "--"), " ")
			if !strings.Contains(line, "(env "+envName(flag)) {
				t.Errorf("bub %s --help: %q does not name %s", name, line, envName(flag))
			}
		}
		if flags == 0 && name != "version" {
			t.Errorf("bub %s --help lists no flags:\n%s", name, errOut.String())
		}
	}
}
