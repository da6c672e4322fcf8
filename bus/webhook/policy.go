package webhook

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"time"
)

// lookupTimeout bounds the name lookup of addressRefused.
const lookupTimeout = 2 * time.Second

// addressRefused says why the bus would refuse every call to
// rawURL under its address policy (the dialer of newClient), or
// "" when it might call it. webhook.add asks it so that a URL the bus
// will never call is refused when it is added, naming the flag that
// allows it, rather than accepted and every delivery then dead-lettered.
// The dialer still decides each call: a name that fails to resolve now,
// or resolves to a public address now and an inside one later, passes
// here and is refused there.
func (w *webhooks) addressRefused(ctx context.Context, rawURL string) string {
	if w.opts.AllowPrivate {
		return ""
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return "" // subscribe says what is wrong with it
	}
	host := u.Hostname()
	addrs := []netip.Addr{}
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = append(addrs, a)
	} else {
		ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
		defer cancel()
		if addrs, err = net.DefaultResolver.LookupNetIP(ctx, "ip", host); err != nil {
			return ""
		}
	}
	for _, a := range addrs {
		if publicAddress(a) {
			return "" // the dialer tries each address; this one it calls
		}
	}
	if len(addrs) == 0 {
		return ""
	}
	what := addrs[0].String() + " is"
	if addrs[0].String() != host {
		what = fmt.Sprintf("%s resolves to %v, each", host, addrs)
	}
	return fmt.Sprintf("url %q: %s a loopback, private or link-local address, which this bus does not call; start bub serve with --webhook-allow-private (BUB_WEBHOOK_ALLOW_PRIVATE) to allow it (docs/SECURITY.md)",
		u.Redacted(), what)
}
