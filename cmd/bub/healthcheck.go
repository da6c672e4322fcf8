package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/bub-bus/bub/internal/redact"
)

func init() {
	register("healthcheck", "exit 0 when a bub daemon's health endpoint answers ready (for container health checks)", runHealthcheck)
}

// defaultHealthURL is the bus's readiness endpoint on its default
// address: what a container's HEALTHCHECK asks from inside the container.
const defaultHealthURL = "http://127.0.0.1:7892/readyz"

// runHealthcheck asks a health endpoint once. It exists because the image
// is FROM scratch: there is no shell, curl or wget for a HEALTHCHECK to
// run, so bub itself has to be the probe.
func runHealthcheck(ctx context.Context, io stdio, args []string) int {
	var (
		rawURL   string
		timeout  time.Duration
		insecure bool
	)
	fs := newFlagSet(io, "healthcheck [flags]", "healthcheck [--url URL] [--timeout D] [--insecure]\n\n"+
		"Asks a bub daemon's health endpoint (GET) once. Exits 0 when it answers 200, else 1 with\n"+
		"one line saying why. No credential is sent: /readyz and /healthz need none.")
	fs.StringVar(&rawURL, "url", defaultHealthURL, "the endpoint: /readyz (ready to serve, 503 while draining) or /healthz (the process answers)")
	fs.DurationVar(&timeout, "timeout", 5*time.Second, "how long to wait for the answer")
	fs.BoolVar(&insecure, "insecure", false, "over https, do not verify the certificate: for a probe on loopback, where the certificate names the bus's public name; the answer is trusted for liveness only")
	// A deployment sets the URL once (a bus on another port or with TLS)
	// and the image's HEALTHCHECK stays the same.
	bindEnvAs(fs, "url", "BUB_HEALTHCHECK_URL")
	if code, ok := parseFlags(fs, io, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return usagef(io, "healthcheck", "unexpected argument %q (give the endpoint with --url)", fs.Arg(0))
	}
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usagef(io, "healthcheck", "--url %q is not an http:// or https:// URL, such as %s", redact.URL(rawURL), defaultHealthURL)
	}
	if err := probe(ctx, u.String(), timeout, insecure); err != nil {
		return errorf(io, "%s: %v", u.Redacted(), err)
	}
	return 0
}

// probe GETs url and returns nil for a 200, else what went wrong in a few
// words, with the body's first line (the bus says "draining").
func probe(ctx context.Context, url string, timeout time.Duration, insecure bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.Proxy = nil // a probe of this host never goes through a proxy
	if insecure {
		transport.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // asked for with --insecure, for loopback probes
	}
	client := &http.Client{Transport: transport}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("no answer within %s", timeout)
		}
		return unwrapURLError(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode == http.StatusOK {
		return nil
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(body)), "\n")
	if line == "" {
		return fmt.Errorf("not ready: %s", resp.Status)
	}
	return fmt.Errorf("not ready: %s: %s", resp.Status, line)
}

// unwrapURLError drops the "Get \"URL\": " that net/http puts in front of
// every error, since the caller names the URL already.
func unwrapURLError(err error) error {
	if ue, ok := err.(*url.Error); ok {
		return ue.Err
	}
	return err
}
