// Package httpapi is the bus's HTTP API (docs/PROTOCOL.md, "HTTP
// binding"): POST /v1/messages publishes one message as sendMessage
// does, for callers that speak HTTP only, and GET /v1/openapi.json
// serves the OpenAPI 3.1 document of the bus's HTTP paths.
//
// It is an add-on: an API in bus.Options.Extensions registers its paths
// and publishes through the core's one publish path (bus.Server.Publish),
// with the same credential, grant, limits, checks and idempotency as
// every other door.
package httpapi
