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
// does not parse, the one an error names most often, loses it too.
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
		return raw
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

// ParseError returns err with the URL a *url.Error names (url.Parse
// quotes the whole input) passed through URL; any other error is
// returned as is.
func ParseError(err error) error {
	var ue *url.Error
	if !errors.As(err, &ue) {
		return err
	}
	c := *ue
	c.URL = URL(ue.URL)
	return &c
}
