package main

import (
	"fmt"
	"path/filepath"
	"reflect"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/bub-bus/bub/bus/webhook"
	"github.com/bub-bus/bub/protocol"
)

// The webhooks: section of the configuration file (docs/OPERATIONS.md,
// "Webhooks"): in: are the incoming webhooks at /v1/hooks/{name}, out:
// the subscriptions whose subscribers are URLs. Secrets come from files,
// relative to the configuration file, so the file itself holds none and
// --print-config has none to show. They are read at start; a SIGHUP
// does not reload this section.
type webhooksConfig struct {
	In  []hookConfig    `yaml:"in,omitempty"`
	Out []webhookConfig `yaml:"out,omitempty"`
}

// hookConfig is one incoming webhook, as webhook.Hook.
type hookConfig struct {
	Name         string        `yaml:"name,omitempty"`
	Scheme       string        `yaml:"scheme,omitempty"`
	SecretFile   string        `yaml:"secret_file,omitempty"`
	Header       string        `yaml:"header,omitempty"`
	Encoding     string        `yaml:"encoding,omitempty"`
	Prefix       string        `yaml:"prefix,omitempty"`
	Tolerance    time.Duration `yaml:"tolerance,omitempty"`
	Topic        string        `yaml:"topic,omitempty"`
	DeliveryID   string        `yaml:"delivery_id,omitempty"`
	Insecure     bool          `yaml:"insecure,omitempty"`
	MaxBodyBytes int64         `yaml:"max_body_bytes,omitempty"`
}

// webhookConfig is one webhook subscription, as webhook.Subscription.
type webhookConfig struct {
	Name       string `yaml:"name,omitempty"`
	URL        string `yaml:"url,omitempty"`
	Pattern    string `yaml:"pattern,omitempty"`
	Policy     string `yaml:"policy,omitempty"`
	SecretFile string `yaml:"secret_file,omitempty"`
}

// webhooks decodes the webhooks: section strictly, as auth: is.
func (l *configLoader) webhooks(v *yaml.Node) *webhooksConfig {
	before := len(l.errs)
	l.checkKeys(v, reflect.TypeFor[webhooksConfig](), "webhooks")
	if len(l.errs) > before {
		return nil
	}
	var cfg webhooksConfig
	if err := v.Decode(&cfg); err != nil {
		l.errs = append(l.errs, l.yamlError(err))
		return nil
	}
	return &cfg
}

// loadWebhooks reads the file's webhooks and their secrets into the
// webhooks' options.
func loadWebhooks(cf *configFile) (hooks []webhook.Hook, subs []webhook.Subscription, err error) {
	if cf == nil || cf.webhooks == nil {
		return nil, nil, nil
	}
	dir := filepath.Dir(cf.path)
	for i, h := range cf.webhooks.In {
		secret, err := readSecret("", relativeTo(dir, h.SecretFile), "", "secret_file")
		if err != nil {
			return nil, nil, fmt.Errorf("%s: webhooks.in[%d] (%s): %w", cf.path, i, h.Name, err)
		}
		hooks = append(hooks, webhook.Hook{
			Name: h.Name, Scheme: h.Scheme, Secret: []byte(secret), Header: h.Header, Encoding: h.Encoding, Prefix: h.Prefix,
			Tolerance: h.Tolerance, Topic: h.Topic, DeliveryID: h.DeliveryID, Insecure: h.Insecure, MaxBodyBytes: h.MaxBodyBytes,
		})
	}
	for i, w := range cf.webhooks.Out {
		secret, err := readSecret("", relativeTo(dir, w.SecretFile), "", "secret_file")
		if err != nil {
			return nil, nil, fmt.Errorf("%s: webhooks.out[%d] (%s): %w", cf.path, i, w.Name, err)
		}
		subs = append(subs, webhook.Subscription{Name: w.Name, URL: w.URL, Pattern: w.Pattern, Policy: protocol.Policy(w.Policy), Secret: []byte(secret)})
	}
	return hooks, subs, nil
}

// relativeTo resolves a path the file names against the file's
// directory.
func relativeTo(dir, path string) string {
	if path == "" || filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(dir, path)
}
