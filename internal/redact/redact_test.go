package redact

import (
	"net/url"
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

func TestParseError(t *testing.T) {
	_, err := url.Parse("ws://alice:s3cret@[::1")
	if err == nil {
		t.Fatal("the URL parsed")
	}
	if got := ParseError(err).Error(); strings.Contains(got, "s3cret") || !strings.Contains(got, "[::1") {
		t.Errorf("ParseError = %q", got)
	}
}
