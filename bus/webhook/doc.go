// Package webhook is the bus's webhooks, in and out, as an add-on
// (bus.Extension): incoming webhooks, which a service that can only call
// a URL (GitHub, Stripe, a cron job) POSTs to /v1/hooks/{name} and the
// bus publishes as messages; and webhook subscriptions, whose subscriber
// is a URL the bus POSTs each delivery to, signed, with the webhook.add,
// webhook.remove and webhook.list admin methods that manage them at run
// time (docs/PROTOCOL.md, "Webhooks in" and "Webhooks out").
//
// It uses only what package bus exports: Handle and HandleMethod for
// its doors, Publish for what comes in, Subscribe for what goes out
// (retries, holds, dead letters and the journal are the core's, as for
// any subscriber), Idempotently for replays.
package webhook
