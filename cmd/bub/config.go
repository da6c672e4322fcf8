package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/bub-bus/bub/auth"
	"github.com/bub-bus/bub/protocol"
)

// The configuration file of bub serve (docs/SECURITY.md, "Configuration
// file") is a layer under the flags: every top-level key is a serve flag
// in snake_case, the limits: section holds the limit flags, and auth: is
// auth.Config. Because the file only ever sets flags, one set of names,
// types and parsers serves the command line, the environment and the
// file, and a flag added to serve is a file key without further work.

// limitFlags are the serve flags that live under limits: in the file, so
// that a SIGHUP can reload them as one section.
var limitFlags = map[string]bool{
	"max-connections":                   true,
	"max-connections-per-addr":          true,
	"handshake-timeout":                 true,
	"max-subscriptions":                 true,
	"max-topic-bytes":                   true,
	"max-pattern-wildcards":             true,
	"max-pending":                       true,
	"max-pending-per-identity":          true,
	"max-stored-bytes":                  true,
	"max-stored-bytes-per-identity":     true,
	"max-dead-letters":                  true,
	"max-dead-letter-bytes":             true,
	"max-replay-ids":                    true,
	"max-durable-per-identity":          true,
	"max-idempotency-keys-per-identity": true,
	"max-connections-per-identity":      true,
	"max-streams-per-identity":          true,
	"max-http-publishers-per-identity":  true,
	"slow-subscriber-timeouts":          true,
	"publish-rate":                      true,
	"publish-burst":                     true,
}

// listFlags are comma-separated flags; in the file they may also be
// YAML sequences, which read better and need no escaping.
var listFlags = map[string]bool{
	"hold-patterns":   true,
	"allowed-origins": true,
	"hosts":           true,
	"nats-routes":     true,
	"nats-url":        true,
}

// notFileKeys are flags that make no sense inside the file they name.
var notFileKeys = map[string]bool{
	"config":       true,
	"print-config": true,
}

// valueChecks check the values whose flag type (a string) accepts more
// than serve does, so that the file's mistakes carry their line rather
// than surfacing later without one.
var valueChecks = map[string]func(string) error{
	"log-level": func(v string) error {
		var lvl slog.Level
		if lvl.UnmarshalText([]byte(v)) != nil {
			return errors.New("want debug, info, warn or error")
		}
		return nil
	},
	"log-format": func(v string) error {
		if v != "text" && v != "json" {
			return errors.New("want text or json")
		}
		return nil
	},
	"default-policy": func(v string) error {
		if !protocol.Policy(v).Valid() {
			return fmt.Errorf("want one of %v", protocol.Policies)
		}
		return nil
	},
}

// maxConfigNodes bounds the YAML nodes the strict key check visits, so
// that aliases expanding into one another (a "billion laughs" file)
// cannot make loading slow.
const maxConfigNodes = 100_000

// configFile is what a loaded configuration file holds beyond the flag
// values it set.
type configFile struct {
	path string
	// auth is the auth: section; nil when the file has none, which leaves
	// the bus open.
	auth *auth.Config
	// authLine is the line of the auth: key, for errors auth.New reports.
	authLine int
	// webhooks is the webhooks: section (webhooks.go); nil without one.
	webhooks *webhooksConfig
}

// fileKey is the file's name for a flag: --max-message-bytes is
// max_message_bytes.
func fileKey(flagName string) string { return strings.ReplaceAll(flagName, "-", "_") }

// readConfigFile loads path onto fs, skipping the flags in explicit (set
// on the command line or in the environment, which win over the file).
// Every value is also checked on scratch, a FlagSet of the same flags, so
// that an error in the file shows even where a flag hides the value.
func readConfigFile(path string, fs, scratch *flag.FlagSet, explicit map[string]bool) (*configFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return parseConfigFile(path, data, fs, scratch, explicit)
}

// parseConfigFile is readConfigFile on the file's contents. Every error
// it returns is one or more lines of the form "PATH:LINE: what", or
// "PATH: what" where YAML gave no position.
func parseConfigFile(path string, data []byte, fs, scratch *flag.FlagSet, explicit map[string]bool) (*configFile, error) {
	l := &configLoader{path: path, fs: fs, scratch: scratch, explicit: explicit, budget: maxConfigNodes}
	cf := &configFile{path: path}
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return cf, nil // an empty file: all defaults
		}
		return nil, l.yamlError(err)
	}
	var second yaml.Node
	if err := dec.Decode(&second); err == nil {
		return nil, l.errorAt(&second, "a second YAML document; the configuration is one document")
	} else if !errors.Is(err, io.EOF) {
		return nil, l.yamlError(err)
	}
	doc := &root
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		doc = doc.Content[0]
	}
	if doc.Kind == yaml.ScalarNode && doc.Tag == "!!null" {
		return cf, nil // only comments
	}
	if doc.Kind != yaml.MappingNode {
		return nil, l.errorAt(doc, "the top level must be a mapping of keys to values")
	}
	l.section(doc, "", func(k, v *yaml.Node) {
		switch k.Value {
		case "auth":
			cf.authLine = k.Line
			cf.auth = l.auth(v)
		case "webhooks":
			cf.webhooks = l.webhooks(v)
		case "limits":
			v = resolveAlias(v)
			if v.Kind != yaml.MappingNode {
				l.errorAt(v, "limits: want a mapping of limit names to values")
				return
			}
			l.section(v, "limits", func(k, v *yaml.Node) { l.flagKey(k, v, "limits", true) })
		default:
			l.flagKey(k, v, "", false)
		}
	})
	if len(l.errs) > 0 {
		return nil, errors.Join(l.errs...)
	}
	return cf, nil
}

type configLoader struct {
	path     string
	fs       *flag.FlagSet
	scratch  *flag.FlagSet
	explicit map[string]bool
	errs     []error
	budget   int
}

// errorAt records an error at n's line and returns it.
func (l *configLoader) errorAt(n *yaml.Node, format string, args ...any) error {
	err := fmt.Errorf("%s:%d: %s", l.path, n.Line, fmt.Sprintf(format, args...))
	l.errs = append(l.errs, err)
	return err
}

// yamlLine matches the position yaml puts in its messages.
var yamlLine = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)

// yamlError turns yaml's "yaml: line 3: …" into "PATH:3: …", one line per
// error of a TypeError.
func (l *configLoader) yamlError(err error) error {
	var msgs []string
	var te *yaml.TypeError
	if errors.As(err, &te) {
		msgs = te.Errors
	} else {
		msgs = []string{err.Error()}
	}
	var errs []error
	for _, msg := range msgs {
		if m := yamlLine.FindStringSubmatch(msg); m != nil {
			errs = append(errs, fmt.Errorf("%s:%s: %s", l.path, m[1], m[2]))
		} else {
			errs = append(errs, fmt.Errorf("%s: %s", l.path, strings.TrimPrefix(msg, "yaml: ")))
		}
	}
	return errors.Join(errs...)
}

// section calls each with the key and value of every entry of mapping m,
// refusing keys that are not plain strings and keys given twice.
func (l *configLoader) section(m *yaml.Node, where string, each func(k, v *yaml.Node)) {
	seen := map[string]int{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.Tag == "!!merge" {
			l.errorAt(k, "%s: keys must be plain names (no merge keys or complex keys)", orTop(where))
			continue
		}
		if line, dup := seen[k.Value]; dup {
			l.errorAt(k, "key %q %s given twice (first at line %d)", k.Value, in(where), line)
			continue
		}
		seen[k.Value] = k.Line
		each(k, v)
	}
}

func orTop(where string) string {
	if where == "" {
		return "top level"
	}
	return where
}

func in(where string) string {
	if where == "" {
		return "at the top level"
	}
	return "in " + where
}

// flagKey applies one file key that names a flag. inLimits says whether
// the key sits under limits:, where only limit flags belong.
func (l *configLoader) flagKey(k, v *yaml.Node, where string, inLimits bool) {
	name := strings.ReplaceAll(k.Value, "_", "-")
	f := l.fs.Lookup(name)
	// A key is the flag's snake_case name only: listen, delivery_timeout.
	if f == nil || strings.Contains(k.Value, "-") || notFileKeys[name] || limitFlags[name] != inLimits {
		hint := ""
		switch {
		case f != nil && strings.Contains(k.Value, "-"):
			hint = fmt.Sprintf(" (file keys use underscores: %s)", fileKey(name))
		case f != nil && limitFlags[name] && !inLimits:
			hint = " (it belongs under limits:)"
		case f != nil && !limitFlags[name] && inLimits && !notFileKeys[name]:
			hint = " (it belongs at the top level)"
		}
		l.errorAt(k, "unknown key %q %s%s", k.Value, in(where), hint)
		return
	}
	path := k.Value
	if where != "" {
		path = where + "." + k.Value
	}
	value, ok := l.flagValue(v, name, path)
	if !ok {
		return
	}
	err := l.scratch.Set(name, value)
	if check := valueChecks[name]; err == nil && check != nil {
		err = check(value)
	}
	if err != nil {
		l.errorAt(v, "%s: invalid value %q: %v", path, value, err)
		return
	}
	if l.explicit[name] {
		return // the command line or the environment wins
	}
	if err := l.fs.Set(name, value); err != nil {
		l.errorAt(v, "%s: invalid value %q: %v", path, value, err)
	}
}

// flagValue is the flag syntax of a file value: a scalar as written, a
// sequence of a list flag joined with commas.
func (l *configLoader) flagValue(v *yaml.Node, name, path string) (string, bool) {
	v = resolveAlias(v)
	switch v.Kind {
	case yaml.ScalarNode:
		if v.Tag == "!!null" {
			l.errorAt(v, "%s: no value (remove the key to get the default)", path)
			return "", false
		}
		return v.Value, true
	case yaml.SequenceNode:
		if !listFlags[name] {
			break
		}
		items := make([]string, 0, len(v.Content))
		for i, item := range v.Content {
			item = resolveAlias(item)
			if item.Kind != yaml.ScalarNode || item.Tag == "!!null" || strings.Contains(item.Value, ",") {
				l.errorAt(item, "%s[%d]: want a non-empty value without commas", path, i)
				return "", false
			}
			items = append(items, item.Value)
		}
		return strings.Join(items, ","), true
	}
	if listFlags[name] {
		l.errorAt(v, "%s: want a list or a comma-separated string", path)
	} else {
		l.errorAt(v, "%s: want a single value", path)
	}
	return "", false
}

func resolveAlias(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 100; i++ {
		n = n.Alias
	}
	return n
}

// auth decodes the auth: section strictly: an unknown key anywhere in it
// is an error naming its line and path, as a misspelt deny: must not
// silently grant more than the operator meant.
func (l *configLoader) auth(v *yaml.Node) *auth.Config {
	if r := resolveAlias(v); r.Kind == yaml.ScalarNode && r.Tag == "!!null" {
		l.errorAt(v, "auth: empty section; remove it for an open bus, or list identities or issuers")
		return nil
	}
	before := len(l.errs)
	l.checkKeys(v, reflect.TypeFor[auth.Config](), "auth")
	if len(l.errs) > before {
		return nil
	}
	var cfg auth.Config
	if err := v.Decode(&cfg); err != nil {
		l.errs = append(l.errs, l.yamlError(err))
		return nil
	}
	return &cfg
}

// checkKeys walks n against the YAML shape of t and records every
// mapping key t has no field for. Type mismatches are left to Decode,
// which reports them with their lines.
func (l *configLoader) checkKeys(n *yaml.Node, t reflect.Type, path string) {
	if l.budget--; l.budget == 0 {
		l.errorAt(n, "%s: too many values (aliases expanding into each other?)", path)
	}
	if l.budget <= 0 {
		return
	}
	n = resolveAlias(n)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return
		}
		fields := yamlFields(t)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Tag == "!!merge" {
				// <<: *anchor shares a block between entries; its keys
				// must fit this struct as well.
				v = resolveAlias(v)
				if v.Kind == yaml.SequenceNode {
					for _, m := range v.Content {
						l.checkKeys(m, t, path)
					}
				} else {
					l.checkKeys(v, t, path)
				}
				continue
			}
			ft, ok := fields[k.Value]
			if !ok || k.Kind != yaml.ScalarNode {
				l.errorAt(k, "unknown key %q in %s", k.Value, path)
				continue
			}
			l.checkKeys(v, ft, path+"."+k.Value)
		}
	case reflect.Slice, reflect.Array:
		if n.Kind == yaml.SequenceNode {
			for i, item := range n.Content {
				l.checkKeys(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i))
			}
		}
	case reflect.Map:
		if n.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(n.Content); i += 2 {
				l.checkKeys(n.Content[i+1], t.Elem(), path+"."+n.Content[i].Value)
			}
		}
	}
}

// yamlFields maps the YAML keys of struct t to their types, following
// yaml's rules: the tag's name, else the lower-cased field name; inline
// structs contribute their own keys.
func yamlFields(t reflect.Type) map[string]reflect.Type {
	fields := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("yaml")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if strings.Contains(","+opts+",", ",inline,") {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for k, v := range yamlFields(ft) {
					fields[k] = v
				}
			}
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		fields[name] = f.Type
	}
	return fields
}

// loadAuth compiles the file's auth section under --max-token-lifetime;
// nil, nil when there is none, which leaves the bus open. It is the one
// place serve builds an Authenticator, at start and on SIGHUP; key files
// are read relative to the configuration file's directory.
func loadAuth(cfg *serveConfig) (*auth.Authenticator, error) {
	if cfg.maxTokenLifetime <= 0 {
		return nil, fmt.Errorf("--max-token-lifetime %s: want a positive duration", cfg.maxTokenLifetime)
	}
	cf := cfg.file
	if cf == nil || cf.auth == nil {
		return nil, nil
	}
	ac := *cf.auth
	ac.MaxTokenLifetime = cfg.maxTokenLifetime
	a, err := auth.New(ac, filepath.Dir(cf.path))
	if err != nil {
		return nil, fmt.Errorf("%s:%d: %w", cf.path, cf.authLine, err)
	}
	return a, nil
}

// redacted is the text print-config shows in place of a secret.
const redacted = "<redacted>"

// printConfig writes the effective configuration as a YAML file that
// --config accepts (secrets aside, which are redacted): every serve
// setting after flags, environment, file and defaults.
func printConfig(w io.Writer, fs *flag.FlagSet, cf *configFile) error {
	root := &yaml.Node{Kind: yaml.MappingNode}
	root.HeadComment = "Effective configuration of bub serve: flags > BUB_* environment > file > defaults.\nSecrets are shown as " + redacted + "."
	if cf != nil {
		root.HeadComment += "\nFile: " + cf.path
	}
	limits := &yaml.Node{Kind: yaml.MappingNode}
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if notFileKeys[f.Name] || err != nil {
			return
		}
		var v *yaml.Node
		if v, err = flagValueNode(f); err != nil {
			return
		}
		if f.Name == "nats-url" {
			// A NATS URL may carry user:password.
			for _, item := range v.Content {
				item.Value = redactURLs(item.Value)
			}
		}
		k := &yaml.Node{Kind: yaml.ScalarNode, Value: fileKey(f.Name)}
		if limitFlags[f.Name] {
			limits.Content = append(limits.Content, k, v)
		} else {
			root.Content = append(root.Content, k, v)
		}
	})
	if err != nil {
		return err
	}
	root.Content = append(root.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: "limits"}, limits)
	if cf != nil && cf.webhooks != nil {
		// Secrets are files; the section names them, never holds them.
		var wh yaml.Node
		if err := wh.Encode(cf.webhooks); err != nil {
			return fmt.Errorf("print webhooks: %w", err)
		}
		root.Content = append(root.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: "webhooks"}, &wh)
	}
	if cf != nil && cf.auth != nil {
		var a yaml.Node
		if err := a.Encode(redactAuth(*cf.auth)); err != nil {
			return fmt.Errorf("print auth: %w", err)
		}
		root.Content = append(root.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: "auth"}, &a)
	}
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(root); err != nil {
		return fmt.Errorf("print config: %w", err)
	}
	return enc.Close()
}

// flagValueNode is a flag's value as a typed YAML node: numbers and
// booleans unquoted, durations as "30s", lists as sequences.
func flagValueNode(f *flag.Flag) (*yaml.Node, error) {
	if listFlags[f.Name] {
		seq := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
		for _, item := range splitList(f.Value.String()) {
			seq.Content = append(seq.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: item})
		}
		return seq, nil
	}
	var v any = f.Value.String()
	if g, ok := f.Value.(flag.Getter); ok {
		v = g.Get()
	}
	switch x := v.(type) {
	case time.Duration:
		v = x.String()
	}
	n := &yaml.Node{}
	if err := n.Encode(v); err != nil {
		return nil, fmt.Errorf("print --%s: %w", f.Name, err)
	}
	return n, nil
}

// redactAuth copies cfg with every token hash replaced: a hash of a
// low-entropy token can be guessed, so it is treated as the secret.
func redactAuth(cfg auth.Config) auth.Config {
	ids := make([]auth.Identity, len(cfg.Identities))
	copy(ids, cfg.Identities)
	for i := range ids {
		if ids[i].TokenSHA256 != "" {
			ids[i].TokenSHA256 = redacted
		}
	}
	cfg.Identities = ids
	return cfg
}
