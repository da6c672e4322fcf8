package main

import (
	"fmt"
	"strings"
)

// parseRelays parses bub bcp gateway's --relays: relays separated by
// ';', each NAME=USER1,USER2, as in "telegram=42,43;slack=U1". NAME is
// the relay's clientId; the users are the humans it may decide for, as
// its decisions' on_behalf_of names them ("tg:42"), or without the
// scheme ("42").
func parseRelays(s string) (map[string][]string, error) {
	relays := map[string][]string{}
	for _, item := range strings.Split(s, ";") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, users, ok := strings.Cut(item, "=")
		name = strings.TrimSpace(name)
		if !ok || name == "" {
			return nil, fmt.Errorf("%q: want NAME=USER1,USER2 (the relay's clientId, then the users it decides for)", item)
		}
		list := splitList(users)
		if len(list) == 0 {
			return nil, fmt.Errorf("%q: relay %s lists no users", item, name)
		}
		if _, dup := relays[name]; dup {
			return nil, fmt.Errorf("relay %s given twice; list all its users once", name)
		}
		relays[name] = list
	}
	return relays, nil
}
