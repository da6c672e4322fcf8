package redact

import (
	"strings"
	"testing"
)

func TestURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"ws://127.0.0.1:7892/", "ws://127.0.0.1:7892/"},
		{"ws://alice:s3cret@127.0.0.1:/", "ws://127.0.0.1:/"},
		{"wss://tok@bus.example/ws?x=a@b", "wss://bus.example/ws?x=a@b"},
		{"alice:s3cret@host:7892", "host:7892"},
		{"nats://u:p@w@n1:6222", "nats://n1:6222"},
		{"http://h/a@b", "http://h/a@b"},
		{"ws://u:p@[::1", "ws://[::1"},
		// A password with an unencoded '/', '?' or '#': url.Parse
		// takes its start for a port, and fails.
		{"ws://admin:s3/cr+et=@host:7892/", "ws://host:7892/"},
		{"ws://admin:s3?cret@host:7892/x", "ws://host:7892/x"},
		{"ws://admin:s3cr#et@host:7892/", "ws://host:7892/"},
		{"ws://h:7892/a@b", "ws://h:7892/a@b"},
		{"", ""},
	} {
		if got := URL(tc.in); got != tc.want {
			t.Errorf("URL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got := URLs("ws://a:b@h1:1/, ws://h2:2/"); got != "ws://h1:1/, ws://h2:2/" {
		t.Errorf("URLs = %q", got)
	}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"ws://alice:s3cret@[::1", `parse "ws://[::1": missing ']' in host`},
		{"ws://alice:s3cret@host:x/", `parse "ws://host:x/": invalid port ":x" after host`},
		// url.Parse's reason quotes the password's start as a port.
		{"ws://alice:s3/cret@host:7892/", `parse "ws://host:7892/": ` + errUserinfo.Error()},
		{"ws://alice:s3cr#et@host:7892/", `parse "ws://host:7892/": ` + errUserinfo.Error()},
		{"ws://al ice:s3cret@host:7892/", `parse "ws://host:7892/": ` + errUserinfo.Error()},
		{"ws://host:x/", `parse "ws://host:x/": invalid port ":x" after host`},
	} {
		_, err := Parse(tc.in)
		if err == nil {
			t.Fatalf("%q parsed", tc.in)
		}
		got := err.Error()
		if got != tc.want {
			t.Errorf("Parse(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if strings.Contains(got, "s3") || strings.Contains(got, "alice") {
			t.Errorf("Parse(%q) = %q shows the credentials", tc.in, got)
		}
	}
}
