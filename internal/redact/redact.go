// Package redact hides the credentials a URL may carry (user:password@ in
// its authority) from the errors and logs that name the URL.
package redact

import (
	"errors"
	"net/url"
	"strings"
)

// URL returns raw without the userinfo of its authority: the part up to
// an '@' after the scheme's "://" (or from the start, when there is no
// scheme) and before the path. It works on the text, so that a URL that
// does not parse, the one an error names most often, loses it too. A
// password holding a '/', '?' or '#' not percent-encoded (base64 has
// '/') ends the authority early to the eye of url.Parse, which then
// fails, say on a port that is the password's start: a URL that does
// not parse loses everything up to its last '@', wherever that is.
func URL(raw string) string {
	start := 0
	if i := strings.Index(raw, "://"); i >= 0 {
		start = i + 3
	}
	end := len(raw)
	if i := strings.IndexAny(raw[start:], "/?#"); i >= 0 {
		end = start + i
	}
	at := strings.LastIndex(raw[start:end], "@")
	if at < 0 {
		if end == len(raw) {
			return raw
		}
		if _, err := url.Parse(raw); err == nil {
			return raw
		}
		if at = strings.LastIndex(raw[start:], "@"); at < 0 {
			return raw
		}
	}
	return raw[:start] + raw[start+at+1:]
}

// URLs is URL for each URL of a comma-separated list.
func URLs(list string) string {
	items := strings.Split(list, ",")
	for i, item := range items {
		items[i] = URL(item)
	}
	return strings.Join(items, ",")
}

// Parse is url.Parse with an error that does not show raw's userinfo:
// url.Parse quotes its input, up to a '#' (where a password may hold
// one), and its reason may quote part of the password too (the "port"
// of a password holding a '/'). The error names URL(raw) instead, with
// the reason that fails (that is url.Parse's for it), or else
// errUserinfo.
func Parse(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err == nil {
		return u, nil
	}
	shown := URL(raw)
	if shown == raw {
		return nil, err
	}
	if _, err := url.Parse(shown); err != nil {
		return nil, err
	}
	return nil, &url.Error{Op: "parse", URL: shown, Err: errUserinfo}
}

// errUserinfo is the reason for a URL that fails to parse only with its
// userinfo, which the error does not show.
var errUserinfo = errors.New("its user:password does not parse: percent-encode any '/', '?', '#' or '@' in it")
