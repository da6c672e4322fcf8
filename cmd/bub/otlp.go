package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/bub-bus/bub/internal/buildinfo"
)

// otlpTracesPath is where an OTLP/HTTP collector takes traces, appended
// to an --otlp-endpoint without a path, as to OTEL_EXPORTER_OTLP_ENDPOINT.
const otlpTracesPath = "/v1/traces"

// traceFlushTimeout bounds the export of the last spans at exit.
const traceFlushTimeout = 5 * time.Second

// parseOTLPEndpoint checks --otlp-endpoint: an http or https URL of a
// collector, with or without the traces path.
func parseOTLPEndpoint(endpoint string) (*url.URL, error) {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--otlp-endpoint %q: want an http:// or https:// URL of an OTLP/HTTP collector, as http://collector:4318", redactURL(endpoint))
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = otlpTracesPath
	}
	return u, nil
}

// redactURL returns endpoint without its user information, which may
// be a credential, for errors and logs.
func redactURL(endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// newTracerProvider returns the tracer provider of bub serve, exporting
// its spans in batches over OTLP/HTTP to endpoint. The OpenTelemetry
// SDK's standard variables apply: OTEL_SERVICE_NAME (default "bub-bus") and
// OTEL_RESOURCE_ATTRIBUTES for the resource, OTEL_TRACES_SAMPLER and
// OTEL_TRACES_SAMPLER_ARG for sampling (default: parent-based, always on),
// OTEL_BSP_* for the batches, OTEL_EXPORTER_OTLP_HEADERS,
// OTEL_EXPORTER_OTLP_COMPRESSION, OTEL_EXPORTER_OTLP_TIMEOUT and the
// certificate variables for the exporter. The SDK's errors, such as a
// collector that does not answer, are logged at WARN.
func newTracerProvider(ctx context.Context, endpoint string, log *slog.Logger) (*sdktrace.TracerProvider, error) {
	u, err := parseOTLPEndpoint(endpoint)
	if err != nil {
		return nil, err
	}
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("otlp traces", "err", err)
	}))
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(u.String()))
	if err != nil {
		return nil, fmt.Errorf("otlp exporter: %w", err)
	}
	// Later sources win: the variables over bub's defaults.
	res, err := resource.New(ctx,
		resource.WithAttributes(
			attribute.String("service.name", buildinfo.Name),
			attribute.String("service.version", buildinfo.Version()),
		),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(),
	)
	if err != nil {
		return nil, fmt.Errorf("otlp resource (OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME): %w", err)
	}
	log.Info("tracing to an OTLP/HTTP collector", "endpoint", u.Redacted())
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}

// flushTraces exports the spans still batched and stops the provider.
func flushTraces(tp *sdktrace.TracerProvider, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), traceFlushTimeout)
	defer cancel()
	if err := tp.Shutdown(ctx); err != nil {
		log.Warn("otlp traces: last spans not exported", "err", err)
	}
}
