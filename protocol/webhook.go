package protocol

// Admin methods of webhook subscriptions (docs/PROTOCOL.md, "Webhooks
// out"): subscriptions whose subscriber is a URL, made and removed at
// run time by a credential with admin, and kept by the bus across
// restarts.
const (
	MethodWebhookAdd    = "webhook.add"
	MethodWebhookRemove = "webhook.remove"
	MethodWebhookList   = "webhook.list"
)

// WebhookAddParams are webhook.add's params: a subscription of Pattern
// whose deliveries are POSTed to URL, signed with Secret.
type WebhookAddParams struct {
	Name    string `json:"name"`
	URL     string `json:"url"`
	Pattern string `json:"pattern"`
	Policy  Policy `json:"policy,omitempty"`
	Secret  string `json:"secret"`
	// PayloadField, when set, makes each delivery's body that field of
	// the message's payload, alone, rather than the processMessage
	// params: for a receiver that expects a body of its own shape (an
	// A2A client's push notification, a StreamResponse).
	PayloadField string `json:"payloadField,omitempty"`
	// Headers are sent with each delivery, as they are: an
	// Authorization a receiver wants, for one. They are never shown, as
	// the secret is not. Content-Type may be set; Bub-*, Host and the
	// hop-by-hop headers may not.
	Headers map[string]string `json:"headers,omitempty"`
}

// WebhookRemoveParams are webhook.remove's params.
type WebhookRemoveParams struct {
	Name string `json:"name"`
}

// Webhook is one webhook subscription as webhook.list and webhook.add
// show it; the secret is never shown.
type Webhook struct {
	Name     string `json:"name"`
	ClientID string `json:"clientId"`
	URL      string `json:"url"`
	Pattern  string `json:"pattern"`
	Policy   Policy `json:"policy"`
	// PayloadField is the payload's field that is the body, "" for the
	// processMessage params.
	PayloadField string `json:"payloadField,omitempty"`
	// Configured is set for those of the configuration file, which
	// webhook.remove cannot remove.
	Configured bool `json:"configured,omitempty"`
}

// WebhookListResult is webhook.list's result, by name.
type WebhookListResult struct {
	Webhooks []Webhook `json:"webhooks"`
}
