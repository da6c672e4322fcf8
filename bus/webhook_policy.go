package bus

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"time"
)

// webhookLookupTimeout bounds the name lookup of webhookAddressRefused.
const webhookLookupTimeout = 2 * time.Second

// webhookAddressRefused says why the bus would refuse every call to
// rawURL under its address policy (the dialer of newWebhookClient), or
// "" when it might call it. webhook.add asks it so that a URL the bus
// will never call is refused when it is added, naming the flag that
// allows it, rather than accepted and every delivery then dead-lettered.
// The dialer still decides each call: a name that fails to resolve now,
// or resolves to a public address now and an inside one later, passes
// here and is refused there.
func (s *Server) webhookAddressRefused(ctx context.Context, rawURL string) string {
	if s.opts.WebhookAllowPrivate {
		return ""
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return "" // addWebhookSubscription says what is wrong with it
	}
	host := u.Hostname()
	addrs := []netip.Addr{}
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = append(addrs, a)
	} else {
		ctx, cancel := context.WithTimeout(ctx, webhookLookupTimeout)
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
