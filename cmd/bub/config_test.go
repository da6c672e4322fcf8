package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// loadServe runs serve's configuration layers as runServe does: the
// environment and args, then the file written from body ("" for none).
func loadServe(t *testing.T, body string, args ...string) (*serveConfig, error) {
	t.Helper()
	if body != "" {
		path := writeFile(t, t.TempDir(), "bub.yaml", body)
		args = append([]string{"--config", path}, args...)
	}
	cfg, fs := newServeFlags(stdio{err: io.Discard})
	if _, ok := parseFlags(fs, stdio{err: io.Discard}, args); !ok {
		t.Fatalf("flags %q do not parse", args)
	}
	return cfg, cfg.applyFile(fs)
}

// TestConfigFileLayers: flags > BUB_* environment > file > defaults, for
// top-level settings, list settings and limits alike.
func TestConfigFileLayers(t *testing.T) {
	const file = `
listen: 127.0.0.1:9001
delivery_timeout: 5s
max_in_flight: 17
hosts: [bus.example, bus.internal]
allowed_origins: "a.example,b.example"
allow_anonymous: true
limits:
  max_connections: 50
  handshake_timeout: 3s
  publish_rate: 2.5
  max_stored_bytes: 1048576
  max_dead_letters: 40
`
	t.Run("file over defaults", func(t *testing.T) {
		cfg, err := loadServe(t, file)
		require.NoError(t, err)
		assert.Equal(t, "127.0.0.1:9001", cfg.listen)
		assert.Equal(t, 5*time.Second, cfg.deliveryTimeout)
		assert.Equal(t, 17, cfg.maxInFlight)
		assert.Equal(t, "bus.example,bus.internal", cfg.hosts)
		assert.Equal(t, []string{"a.example", "b.example"}, splitList(cfg.allowedOrigins))
		assert.True(t, cfg.allowAnonymous)
		assert.Equal(t, 50, cfg.limits.MaxConnections)
		assert.Equal(t, 3*time.Second, cfg.limits.HandshakeTimeout)
		assert.Equal(t, 2.5, cfg.limits.PublishRate)
		assert.Equal(t, 1<<20, cfg.limits.MaxStoredBytes)
		assert.Equal(t, 40, cfg.limits.MaxDeadLetters)
		// What the file leaves out keeps its default.
		assert.Equal(t, 10*time.Second, cfg.writeTimeout)
		assert.Equal(t, 0, cfg.limits.MaxSubscriptions)
		assert.Nil(t, cfg.file.auth, "no auth: section")
	})
	t.Run("environment over file", func(t *testing.T) {
		t.Setenv("BUB_DELIVERY_TIMEOUT", "7s")
		t.Setenv("BUB_MAX_CONNECTIONS", "60")
		t.Setenv("BUB_MAX_STORED_BYTES_PER_IDENTITY", "4096")
		t.Setenv("BUB_MAX_DEAD_LETTER_BYTES", "8192")
		cfg, err := loadServe(t, file)
		require.NoError(t, err)
		assert.Equal(t, 7*time.Second, cfg.deliveryTimeout)
		assert.Equal(t, 60, cfg.limits.MaxConnections)
		assert.Equal(t, 4096, cfg.limits.MaxStoredBytesPerIdentity)
		assert.Equal(t, 8192, cfg.limits.MaxDeadLetterBytes)
		assert.Equal(t, 17, cfg.maxInFlight, "the file still sets what the environment leaves alone")
	})
	t.Run("flags over environment and file", func(t *testing.T) {
		t.Setenv("BUB_DELIVERY_TIMEOUT", "7s")
		cfg, err := loadServe(t, file, "--delivery-timeout", "9s", "--max-connections", "70", "--hosts", "only.example")
		require.NoError(t, err)
		assert.Equal(t, 9*time.Second, cfg.deliveryTimeout)
		assert.Equal(t, 70, cfg.limits.MaxConnections)
		assert.Equal(t, "only.example", cfg.hosts)
	})
	t.Run("BUB_CONFIG names the file", func(t *testing.T) {
		t.Setenv("BUB_CONFIG", writeFile(t, t.TempDir(), "bub.yaml", file))
		cfg, err := loadServe(t, "")
		require.NoError(t, err)
		assert.Equal(t, "127.0.0.1:9001", cfg.listen)
	})
	t.Run("an empty file is all defaults", func(t *testing.T) {
		cfg, err := loadServe(t, "# nothing yet\n")
		require.NoError(t, err)
		assert.Equal(t, "127.0.0.1:7892", cfg.listen)
	})
}

// TestConfigAuthSection: the auth section decodes into auth.Config,
// anchors and merge keys included, so a grant can be shared.
func TestConfigAuthSection(t *testing.T) {
	cfg, err := loadServe(t, `
auth:
  identities:
    - name: researcher
      token_sha256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
      client_ids: ["researcher"]
      publish: &bcp {allow: ["bcp:*"], deny: ["bcp:secret"]}
      subscribe: {allow: ["agent:{{clientId}}"]}
      admin: false
      fallback: true
      rate: {per_second: 5, burst: 10}
    - name: reader
      cert_subject: reader.example
      publish: *bcp
  issuers:
    - name: spawner
      public_key_file: spawner.pub
      client_ids: ["agent-*"]
      ceiling: {publish: {allow: ["outbound:*"]}, subscribe: {allow: ["agent:{{clientId}}", "tg:*"]}}
  anonymous:
    publish: {allow: ["public:*"]}
`)
	require.NoError(t, err)
	a := cfg.file.auth
	require.NotNil(t, a)
	require.Len(t, a.Identities, 2)
	id := a.Identities[0]
	assert.Equal(t, "researcher", id.Name)
	assert.Equal(t, []string{"researcher"}, id.ClientIDs)
	assert.Equal(t, []string{"bcp:*"}, id.Publish.Allow)
	assert.Equal(t, []string{"bcp:secret"}, id.Publish.Deny)
	assert.True(t, id.Fallback)
	assert.Equal(t, 5.0, id.Rate.PerSecond)
	assert.Equal(t, id.Publish, a.Identities[1].Publish, "the alias shares the anchored rules")
	assert.Equal(t, "reader.example", a.Identities[1].CertSubject)
	require.Len(t, a.Issuers, 1)
	assert.Equal(t, []string{"outbound:*"}, a.Issuers[0].Ceiling.Publish.Allow)
	require.NotNil(t, a.Anonymous)
	assert.Equal(t, []string{"public:*"}, a.Anonymous.Publish.Allow)
	assert.Equal(t, 2, cfg.file.authLine)
}

// TestConfigFileErrors: every mistake is refused with the file, the line
// and what is wrong.
func TestConfigFileErrors(t *testing.T) {
	tests := []struct {
		name string
		body string
		line int
		want string
	}{
		{"unknown top-level key", "listen: 127.0.0.1:1\nlisten_adress: x\n", 2, `unknown key "listen_adress" at the top level`},
		{"kebab-case key", "delivery-timeout: 5s\n", 1, `file keys use underscores: delivery_timeout`},
		{"limit at the top level", "max_connections: 5\n", 1, `belongs under limits:`},
		{"setting under limits", "limits:\n  listen: x\n", 2, `unknown key "listen" in limits (it belongs at the top level)`},
		{"config names no file inside", "config: other.yaml\n", 1, `unknown key "config"`},
		{"unknown key in an identity", "auth:\n  identities:\n    - name: a\n      colour: red\n", 4, `unknown key "colour" in auth.identities[0]`},
		{"misspelt deny", "auth:\n  identities:\n    - name: a\n      publish: {allow: [x], denny: [y]}\n", 4, `unknown key "denny" in auth.identities[0].publish`},
		{"unknown key in a ceiling", "auth:\n  issuers:\n    - name: s\n      ceiling: {admn: true}\n", 4, `unknown key "admn" in auth.issuers[0].ceiling`},
		{"unknown auth key", "auth:\n  users: []\n", 2, `unknown key "users" in auth`},
		{"wrong type in auth", "auth:\n  identities:\n    - name: a\n      admin: maybe\n", 4, "cannot unmarshal"},
		{"empty auth", "auth:\n", 1, "auth: empty section"},
		{"bad duration", "listen: x\ndelivery_timeout: soon\n", 2, `delivery_timeout: invalid value "soon"`},
		{"bad limit", "limits:\n  max_pending: lots\n", 2, `limits.max_pending: invalid value "lots"`},
		{"bad bool", "allow_anonymous: yes please\n", 1, `allow_anonymous: invalid value`},
		{"no value", "listen:\n", 1, "listen: no value"},
		{"bad log level", "log_level: loud\n", 1, `log_level: invalid value "loud": want debug, info, warn or error`},
		{"bad log format", "log_format: xml\n", 1, `log_format: invalid value "xml": want text or json`},
		{"bad policy", "default_policy: sometimes\n", 1, `default_policy: invalid value "sometimes": want one of`},
		{"list for a single value", "listen: [a, b]\n", 1, "listen: want a single value"},
		{"comma inside a list item", "hosts: [\"a,b\"]\n", 1, "hosts[0]: want a non-empty value without commas"},
		{"duplicate key", "listen: a\nlisten: b\n", 2, `key "listen" at the top level given twice (first at line 1)`},
		{"not a mapping", "- listen\n", 1, "the top level must be a mapping"},
		{"limits not a mapping", "limits: 5\n", 1, "limits: want a mapping"},
		{"YAML syntax", "listen: a\n  bad: indent\n", 2, "mapping values are not allowed"},
		{"two documents", "listen: a\n---\nlisten: b\n", 2, "a second YAML document"},
		{"merge key at the top", "<<: {listen: a}\n", 1, "keys must be plain names"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeFile(t, t.TempDir(), "bub.yaml", tt.body)
			cfg, fs := newServeFlags(stdio{err: io.Discard})
			_, ok := parseFlags(fs, stdio{err: io.Discard}, []string{"--config", path})
			require.True(t, ok)
			err := cfg.applyFile(fs)
			require.Error(t, err)
			assert.Contains(t, err.Error(), path+":"+strconv.Itoa(tt.line)+": ", "the error names file:line")
			assert.Contains(t, err.Error(), tt.want)
		})
	}
	t.Run("missing file", func(t *testing.T) {
		_, err := loadServe(t, "", "--config", filepath.Join(t.TempDir(), "absent.yaml"))
		require.Error(t, err)
		assert.Contains(t, err.Error(), "absent.yaml")
	})
	t.Run("a flag does not hide a bad value in the file", func(t *testing.T) {
		_, err := loadServe(t, "delivery_timeout: soon\n", "--delivery-timeout", "1s")
		require.Error(t, err)
		assert.Contains(t, err.Error(), "delivery_timeout")
	})
	t.Run("every error is reported", func(t *testing.T) {
		_, err := loadServe(t, "a: 1\nb: 2\nlimits:\n  c: 3\n")
		require.Error(t, err)
		for _, key := range []string{`"a"`, `"b"`, `"c"`} {
			assert.Contains(t, err.Error(), key)
		}
	})
	t.Run("an alias bomb is cut short", func(t *testing.T) {
		var b strings.Builder
		b.WriteString("auth:\n  identities:\n    - &a0 {name: x}\n")
		for i := 1; i < 30; i++ {
			b.WriteString("    - &a" + strconv.Itoa(i) + " [")
			for j := range 10 {
				if j > 0 {
					b.WriteString(", ")
				}
				b.WriteString("*a" + strconv.Itoa(i-1))
			}
			b.WriteString("]\n")
		}
		start := time.Now()
		_, err := loadServe(t, b.String())
		require.Error(t, err)
		assert.Less(t, time.Since(start), 5*time.Second)
	})
}

// TestServeRefusesBadConfigFile: serve does not start on a bad file, and
// says where the mistake is.
func TestServeRefusesBadConfigFile(t *testing.T) {
	path := writeFile(t, t.TempDir(), "bub.yaml", "listen: 127.0.0.1:0\nauth:\n  identities:\n    - nam: x\n")
	code, _, stderr := runBub(t, "", "serve", "--config", path, "--data-dir", t.TempDir())
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, path+`:4: unknown key "nam" in auth.identities[0]`)
}

// TestPrintConfig: the effective configuration after every layer, with
// token hashes redacted, in a form --config reads back.
func TestPrintConfig(t *testing.T) {
	const hash = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	dir := t.TempDir()
	path := writeFile(t, dir, "bub.yaml", `
listen: 127.0.0.1:9001
delivery_timeout: 5s
hosts: [bus.example]
limits:
  max_connections: 50
auth:
  identities:
    - name: researcher
      token_sha256: "`+hash+`"
      publish: {allow: ["bcp:*"]}
`)
	t.Setenv("BUB_MAX_IN_FLIGHT", "12")
	code, stdout, stderr := runBub(t, "", "serve", "--config", path, "--print-config", "--write-timeout", "3s")
	require.Equal(t, 0, code, stderr)
	assert.NotContains(t, stdout, hash)
	assert.NotContains(t, stdout, hash[:16])

	var printed struct {
		Listen          string         `yaml:"listen"`
		DeliveryTimeout string         `yaml:"delivery_timeout"`
		WriteTimeout    string         `yaml:"write_timeout"`
		MaxInFlight     int            `yaml:"max_in_flight"`
		Hosts           []string       `yaml:"hosts"`
		HoldPatterns    []string       `yaml:"hold_patterns"`
		Limits          map[string]any `yaml:"limits"`
		Auth            struct {
			Identities []struct {
				Name        string `yaml:"name"`
				TokenSHA256 string `yaml:"token_sha256"`
			} `yaml:"identities"`
		} `yaml:"auth"`
	}
	require.NoError(t, yaml.Unmarshal([]byte(stdout), &printed), stdout)
	assert.Equal(t, "127.0.0.1:9001", printed.Listen, "from the file")
	assert.Equal(t, "5s", printed.DeliveryTimeout, "from the file")
	assert.Equal(t, 12, printed.MaxInFlight, "from the environment")
	assert.Equal(t, "3s", printed.WriteTimeout, "from the flag")
	assert.Equal(t, []string{"bus.example"}, printed.Hosts)
	assert.Equal(t, []string{"agent:*"}, printed.HoldPatterns, "the default")
	assert.Equal(t, 50, printed.Limits["max_connections"])
	require.Len(t, printed.Auth.Identities, 1)
	assert.Equal(t, "researcher", printed.Auth.Identities[0].Name)
	assert.Equal(t, "<redacted>", printed.Auth.Identities[0].TokenSHA256)

	t.Run("round trip", func(t *testing.T) {
		// Without secrets the output is a config file that prints the same.
		t.Setenv("BUB_MAX_IN_FLIGHT", "")
		os.Unsetenv("BUB_MAX_IN_FLIGHT")
		noAuth := writeFile(t, dir, "plain.yaml", "listen: 127.0.0.1:9002\nhosts: [a, b]\nlimits: {publish_rate: 1.5, handshake_timeout: 2s}\n")
		code, first, stderr := runBub(t, "", "serve", "--config", noAuth, "--print-config")
		require.Equal(t, 0, code, stderr)
		again := writeFile(t, dir, "again.yaml", first)
		code, second, stderr := runBub(t, "", "serve", "--config", again, "--print-config")
		require.Equal(t, 0, code, stderr)
		body := func(s string) string { _, after, _ := strings.Cut(s, "\nallow_anonymous"); return after }
		assert.Equal(t, body(first), body(second))
		assert.Contains(t, second, "publish_rate: 1.5")
	})
}

// TestHelpShowsDefaultsNotTheFile: --help documents the defaults, even
// when a configuration file is given.
func TestHelpShowsDefaultsNotTheFile(t *testing.T) {
	path := writeFile(t, t.TempDir(), "bub.yaml", "listen: 10.1.2.3:9\nlimits: {max_connections: 5}\n")
	t.Setenv("BUB_CONFIG", path)
	code, stdout, stderr := runBub(t, "", "serve", "--help")
	assert.Equal(t, 0, code)
	help := stdout + stderr
	assert.Contains(t, help, `--listen (env BUB_LISTEN, default "127.0.0.1:7892")`)
	assert.Contains(t, help, `--max-connections (env BUB_MAX_CONNECTIONS, default "0")`)
	assert.NotContains(t, help, "10.1.2.3")
}

// TestOpenBusRefusedOffLoopback: without auth, serve refuses an address
// other hosts can reach, and names the address and both ways out.
func TestOpenBusRefusedOffLoopback(t *testing.T) {
	for _, listen := range []string{"0.0.0.0:0", ":0", "[::]:0", "192.0.2.1:7892", "bus.example:7892"} {
		code, _, stderr := runBub(t, "", "serve", "--listen", listen, "--data-dir", t.TempDir())
		assert.Equal(t, 1, code, listen)
		oneLine(t, stderr, "refusing to listen on "+listen+" without auth")
		assert.Contains(t, stderr, "auth: section")
		assert.Contains(t, stderr, "--allow-anonymous")
	}
	tests := map[string]bool{
		"127.0.0.1:7892": true, "127.9.9.9:1": true, "[::1]:7892": true, "localhost:7892": true, "LOCALHOST:1": true,
		"[::ffff:127.0.0.1]:1": true, "0.0.0.0:7892": false, ":7892": false, "[::]:1": false, "10.0.0.1:1": false,
		"example.com:1": false, "localhost.example.com:1": false,
	}
	for listen, want := range tests {
		assert.Equal(t, want, isLoopback(listen), listen)
		assert.Equal(t, want, checkOpenBus(listen, false, false) == nil, listen)
		assert.NoError(t, checkOpenBus(listen, true, false), "with auth, %s", listen)
		assert.NoError(t, checkOpenBus(listen, false, true), "with --allow-anonymous, %s", listen)
	}
}

// configPosition is the "FILE:LINE: " an error carries when YAML gave a
// position.
var configPosition = regexp.MustCompile(`^fuzz\.yaml:(\d+): `)

// FuzzLoadConfig: the loader never panics on any bytes, and every error
// line starts with the file's name, with a line number inside the file
// where it has one.
func FuzzLoadConfig(f *testing.F) {
	for _, seed := range []string{
		"",
		"listen: 127.0.0.1:1\nhosts: [a, b]\nlimits: {max_connections: 5, publish_rate: 1.5}\n",
		"auth:\n  identities:\n    - name: a\n      token_sha256: ab\n      publish: &p {allow: [x]}\n      subscribe: *p\n",
		"auth:\n  issuers:\n    - {name: s, public_key_file: k.pub, ceiling: {admin: true}}\n  anonymous: {publish: {allow: [x]}}\n",
		"auth:\n  identities:\n    - <<: {name: a}\n      admin: true\n",
		"listen: a\n---\nlisten: b\n",
		"webhooks:\n  in: [{name: a, tolerance: soon, nope: 1}]\n  out: {name: b}\n",
		"delivery_timeout: soon\nx: 1\n",
		"- a\n- b\n",
		"a: &a [*a]\n",
		"\t\"\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		_, fs := newServeFlags(stdio{err: io.Discard})
		_, scratch := newServeFlags(stdio{err: io.Discard})
		_, err := parseConfigFile("fuzz.yaml", data, fs, scratch, map[string]bool{})
		if err == nil {
			return
		}
		// YAML breaks lines at \r as well as \n (and at NEL, LS and PS),
		// so count every one of them; \r\n counts twice, which only
		// loosens the bound.
		lines := 1
		for _, brk := range []string{"\n", "\r", "\u0085", "\u2028", "\u2029"} {
			lines += bytes.Count(data, []byte(brk))
		}
		for _, msg := range strings.Split(err.Error(), "\n") {
			if !strings.HasPrefix(msg, "fuzz.yaml:") {
				// A message may span lines only where a value quoted in
				// it does; the first line of each error is checked.
				continue
			}
			if m := configPosition.FindStringSubmatch(msg); m != nil {
				n, _ := strconv.Atoi(m[1])
				if n < 1 || n > lines+1 {
					t.Fatalf("line %d outside the %d-line input: %q", n, lines, msg)
				}
			}
		}
		if !strings.HasPrefix(err.Error(), "fuzz.yaml:") {
			t.Fatalf("error does not name the file: %q", err)
		}
	})
}

// TestSecurityDocExample: the full example in docs/SECURITY.md is a file
// the loader accepts, with every key it shows.
func TestSecurityDocExample(t *testing.T) {
	doc, err := os.ReadFile("../../docs/SECURITY.md")
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(doc), "### A full example")
	require.True(t, ok, "docs/SECURITY.md has no full example")
	_, block, ok := strings.Cut(section, "```yaml\n")
	require.True(t, ok)
	block, _, ok = strings.Cut(block, "```")
	require.True(t, ok)
	cfg, err := loadServe(t, block)
	require.NoError(t, err)
	assert.Equal(t, "0.0.0.0:7892", cfg.listen)
	assert.Equal(t, 200, cfg.limits.PublishBurst)
	require.NotNil(t, cfg.file.auth)
	assert.Len(t, cfg.file.auth.Identities, 2)
	assert.Len(t, cfg.file.auth.Issuers, 1)
}

// TestPrintConfigShowsValuesInForce: --print-config shows the limits the
// bus applies, not the zeros that stand for them (handshake_timeout: 0s
// where --help says 0 means 10s); a limit set, or set to none (-1), is
// shown as set; and the output, read back with --config, prints the same.
func TestPrintConfigShowsValuesInForce(t *testing.T) {
	t.Parallel()
	out, errOut, code := bub(t, nil, "", "serve", "--print-config", "--max-subscriptions", "7", "--max-pending", "-1")
	require.Equal(t, 0, code, errOut)
	for _, want := range []string{"handshake_timeout: 10s", "max_connections: 10000", "max_pattern_wildcards: 8", "max_subscriptions: 7", "max_pending: -1"} {
		assert.Contains(t, out, "\n  "+want+"\n")
	}
	for _, zero := range []string{"handshake_timeout: 0s", "max_connections: 0\n"} {
		assert.NotContains(t, out, zero)
	}
	again, errOut, code := bub(t, nil, "", "serve", "--print-config", "--config", writeFile(t, t.TempDir(), "bus.yaml", out))
	require.Equal(t, 0, code, errOut)
	settings := func(yaml string) []string {
		var lines []string
		for _, l := range strings.Split(yaml, "\n") {
			if !strings.HasPrefix(l, "#") {
				lines = append(lines, l)
			}
		}
		return lines
	}
	require.Greater(t, len(settings(out)), 40)
	assert.Equal(t, settings(out), settings(again), "the printed configuration read back")
}
