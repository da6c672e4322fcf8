package gateway

import (
	"fmt"
	"strings"
	"unicode"
)

// A relay is a bus client that carries decisions for humans who are not
// on the bus themselves: the Telegram bridge, acting for the Telegram
// users listed for it. The bus attests the relay's clientId; the relay
// attests the human, in the decision's on_behalf_of. A relay's decision
// counts only when it names one of its listed humans.

// maxOnBehalfOf bounds on_behalf_of: an id such as "tg:123456789", not
// prose.
const maxOnBehalfOf = 128

// relayUsers is the set of humans a relay may act for.
type relayUsers map[string]bool

// allows reports whether the relay may decide for who. A listed user
// with a scheme ("tg:42") must match exactly; one without ("42") matches
// the id after the scheme of who ("tg:42"), so --relays telegram=42
// reads as Telegram user 42.
func (r relayUsers) allows(who string) bool {
	if r[who] {
		return true
	}
	if _, id, ok := strings.Cut(who, ":"); ok && id != "" && !strings.Contains(id, ":") {
		return r[id]
	}
	return false
}

// checkOnBehalfOf checks the shape of an on_behalf_of: a short id of
// printable characters without spaces, so that it reads unambiguously in
// the audit log.
func checkOnBehalfOf(who string) error {
	if who == "" {
		return &wireError{CodeMalformed, "on_behalf_of is empty"}
	}
	if len(who) > maxOnBehalfOf {
		return &wireError{CodeMalformed, fmt.Sprintf("on_behalf_of is %d bytes; at most %d", len(who), maxOnBehalfOf)}
	}
	for _, r := range who {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return &wireError{CodeMalformed, fmt.Sprintf("on_behalf_of %q holds a space or an unprintable character", truncate(who))}
		}
	}
	return nil
}

// relaySets checks Options.Relays against the definitions and the
// approvers, and returns them as sets.
func relaySets(relays map[string][]string, approvers map[string]bool, isAgent func(string) bool) (map[string]relayUsers, error) {
	out := make(map[string]relayUsers, len(relays))
	for name, users := range relays {
		switch {
		case name == "":
			return nil, fmt.Errorf("bcp gateway: a relay without a clientId")
		case isAgent(name):
			return nil, fmt.Errorf("bcp gateway: relay %q is an agent of the definitions; an agent must not approve what agents send", name)
		case approvers[name]:
			return nil, fmt.Errorf("bcp gateway: %q is both an approver and a relay; a relay decides only for the humans listed for it", name)
		}
		set := relayUsers{}
		for _, u := range users {
			if u == "" {
				continue
			}
			if err := checkOnBehalfOf(u); err != nil {
				return nil, fmt.Errorf("bcp gateway: relay %q: user %q: %s", name, u, detailOf(err))
			}
			set[u] = true
		}
		if len(set) == 0 {
			return nil, fmt.Errorf("bcp gateway: relay %q lists no users; it would decide for nobody", name)
		}
		out[name] = set
	}
	return out, nil
}

// decider is who decides: an approver's clientId, or a relay and the
// human it acts for.
type decider struct {
	from       string // the attested clientId
	onBehalfOf string // the human, for a relay
}

// String names the decider for DecidedBy and logs: "alice", or
// "tg:42 via telegram".
func (d decider) String() string {
	if d.onBehalfOf == "" {
		return d.from
	}
	return d.onBehalfOf + " via " + d.from
}

// checkDecider applies the approver and relay lists to a decision's
// sender. It returns a refusal's code and detail, or "" when the decision
// counts.
func (g *Gateway) checkDecider(from string, dec *Decision) (code, detail string) {
	users, isRelay := g.relays[from]
	switch {
	case isRelay && dec.OnBehalfOf == "":
		return CodeNotAnApprover, fmt.Sprintf("%s is a relay: its decisions must name the human in on_behalf_of", truncate(from))
	case isRelay && !users.allows(dec.OnBehalfOf):
		return CodeNotAnApprover, fmt.Sprintf("%s is not an approver listed for relay %s", truncate(dec.OnBehalfOf), truncate(from))
	case !isRelay && dec.OnBehalfOf != "":
		return CodeNotAnApprover, fmt.Sprintf("%s is not a relay: it may decide only for itself, not on behalf of %s", truncate(from), truncate(dec.OnBehalfOf))
	}
	return "", ""
}
