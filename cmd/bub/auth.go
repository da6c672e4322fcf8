package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/bub-bus/bub/auth"
)

func init() {
	register("auth", "credentials: token, keygen, issue", runAuth)
}

const authSynopsis = `auth <token|keygen|issue> [flags]

Subcommands:
  token
      Print a new random token (256 bits) and its SHA-256. The token is
      shown once and stored nowhere: give it to the client (BUB_TOKEN or
      a token file); put only the token_sha256 line in the identity's
      entry of the configuration's auth section.
  keygen --out NAME
      Write an Ed25519 key pair for a JWT issuer: NAME, the private key
      (PKCS #8 PEM, mode 0600; for the spawner or bub auth issue), and
      NAME.pub, the public key (an issuer's public_key_file). Refuses to
      overwrite either file.
  issue --key FILE --issuer NAME --client-id ID [--publish P1,P2 ...] [--ttl 24h]
      Print a signed token (JWT) for clientId ID. The bus grants it what
      its claims allow and the issuer's ceiling allows, both.

Pattern lists are comma-separated. docs/SECURITY.md has the rules.`

// authIssueConfig is the flags of bub auth issue.
type authIssueConfig struct {
	key, issuer, clientID                          string
	publish, publishDeny, subscribe, subscribeDeny string
	admin, fallback, publishOnly                   bool
	ttl                                            time.Duration
}

// authFlagSet returns the flags of one auth subcommand, bound to cfg (for
// issue) or out (for keygen); nil for an unknown subcommand.
func authFlagSet(std stdio, sub string, issue *authIssueConfig, out *string) *flag.FlagSet {
	fs := newFlagSet(std, "auth "+sub, authSynopsis)
	switch sub {
	case "token":
	case "keygen":
		fs.StringVar(out, "out", "", "path of the private key to write; the public key goes to this path plus .pub (required)")
	case "issue":
		fs.StringVar(&issue.key, "key", "", "the issuer's private key file, as keygen writes it (required)")
		fs.StringVar(&issue.issuer, "issuer", "", "the issuer's name in the bus's configuration: the token's iss (required)")
		fs.StringVar(&issue.clientID, "client-id", "", "the clientId the token is for: its sub, the only id it may initialize as (required)")
		fs.StringVar(&issue.publish, "publish", "", "topic patterns it may publish to, comma-separated; {{clientId}} is the client's id")
		fs.StringVar(&issue.publishDeny, "publish-deny", "", "topic patterns it may not publish to, comma-separated")
		fs.StringVar(&issue.subscribe, "subscribe", "", "patterns it may subscribe to, comma-separated")
		fs.StringVar(&issue.subscribeDeny, "subscribe-deny", "", "patterns it may not subscribe to, comma-separated")
		fs.BoolVar(&issue.admin, "admin", false, "may call the dlq.* methods (if the issuer's ceiling allows it too)")
		fs.BoolVar(&issue.fallback, "fallback", false, "may hold a fallback subscription (if the ceiling allows it too)")
		fs.BoolVar(&issue.publishOnly, "publish-only", false, "may only connect publish-only: no subscriptions, no takeover")
		fs.DurationVar(&issue.ttl, "ttl", 24*time.Hour, "how long the token is valid; a bus refuses one valid longer than its --max-token-lifetime (default 720h)")
	default:
		return nil
	}
	return fs
}

func runAuth(_ context.Context, std stdio, args []string) int {
	if len(args) == 0 {
		fmt.Fprintf(std.err, "Usage: bub %s\n", authSynopsis)
		return 2
	}
	sub, args := args[0], args[1:]
	if sub == "-h" || sub == "--help" || sub == "help" {
		authHelp(std)
		return 0
	}
	var issue authIssueConfig
	var out string
	fs := authFlagSet(std, sub, &issue, &out)
	if fs == nil {
		fmt.Fprintf(std.err, "bub auth: unknown subcommand %q\n\nUsage: bub %s\n", sub, authSynopsis)
		return 2
	}
	if code, ok := parseFlags(fs, std, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(std.err, "bub auth %s: unexpected argument %q\n", sub, fs.Arg(0))
		return 2
	}
	switch sub {
	case "token":
		return runAuthToken(std)
	case "keygen":
		if out == "" {
			fmt.Fprintln(std.err, "bub auth keygen: --out is required: bub auth keygen --out NAME")
			return 2
		}
		return runAuthKeygen(std, out)
	default:
		return runAuthIssue(std, &issue)
	}
}

// authHelp prints the synopsis and every subcommand's flags, so that one
// --help shows all of them. They are per-invocation arguments, so no
// BUB_* variable sets them.
func authHelp(std stdio) {
	fmt.Fprintf(std.out, "Usage: bub %s\n", authSynopsis)
	for _, sub := range []string{"keygen", "issue"} {
		fmt.Fprintf(std.out, "\nFlags of bub auth %s:\n", sub)
		printFlags(std.out, authFlagSet(std, sub, &authIssueConfig{}, new(string)))
	}
}

func runAuthToken(std stdio) int {
	token, hash, err := auth.NewToken()
	if err != nil {
		return errorf(std, "auth token: %v", err)
	}
	// The labels keep the two apart when pasted: a config file given the
	// token line by mistake fails to load (unknown key) instead of
	// holding the secret.
	fmt.Fprintf(std.out, "token: %s\ntoken_sha256: %s\n", token, hash)
	fmt.Fprintln(std.err, "bub auth token: the token is shown once and stored nowhere; give it to the client (BUB_TOKEN or --token-file) and put only the token_sha256 line in the configuration.")
	return 0
}

func runAuthKeygen(std stdio, out string) int {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return errorf(std, "auth keygen: generate key: %v", err)
	}
	privPEM, err := auth.EncodePrivateKeyPEM(priv)
	if err != nil {
		return errorf(std, "auth keygen: %v", err)
	}
	pubPEM, err := auth.EncodePublicKeyPEM(pub)
	if err != nil {
		return errorf(std, "auth keygen: %v", err)
	}
	pubPath := out + ".pub"
	// Both paths are checked before either is written, so that a refusal
	// leaves nothing behind; O_EXCL below closes the race with another
	// writer.
	for _, path := range []string{out, pubPath} {
		if _, err := os.Lstat(path); err == nil {
			return errorf(std, "auth keygen: %s exists; refusing to overwrite a key", path)
		} else if !errors.Is(err, os.ErrNotExist) {
			return errorf(std, "auth keygen: %v", err)
		}
	}
	if err := writeNew(out, privPEM, 0o600); err != nil {
		return errorf(std, "auth keygen: %v", err)
	}
	if err := writeNew(pubPath, pubPEM, 0o644); err != nil {
		// The private key without its public half is useless and a
		// secret lying around; this run created it, so remove it.
		_ = os.Remove(out)
		return errorf(std, "auth keygen: %v", err)
	}
	fmt.Fprintf(std.out, "private key: %s (keep it secret: whoever has it can sign tokens)\npublic key: %s (an issuer's public_key_file)\n", out, pubPath)
	return 0
}

// writeNew writes data to a file that must not exist yet, with perm set
// at creation so that a private key is never readable by others, not
// even for a moment.
func writeNew(path string, data []byte, perm os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		_ = os.Remove(path)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		_ = os.Remove(path)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func runAuthIssue(std stdio, cfg *authIssueConfig) int {
	for _, req := range []struct{ flag, value string }{{"--key", cfg.key}, {"--issuer", cfg.issuer}, {"--client-id", cfg.clientID}} {
		if req.value == "" {
			fmt.Fprintf(std.err, "bub auth issue: %s is required\n", req.flag)
			return 2
		}
	}
	key, err := auth.LoadPrivateKey(cfg.key)
	if err != nil {
		return errorf(std, "auth issue: %v", err)
	}
	claims := auth.Claims{
		Publish:     auth.Rules{Allow: splitList(cfg.publish), Deny: splitList(cfg.publishDeny)},
		Subscribe:   auth.Rules{Allow: splitList(cfg.subscribe), Deny: splitList(cfg.subscribeDeny)},
		Admin:       cfg.admin,
		Fallback:    cfg.fallback,
		PublishOnly: cfg.publishOnly,
	}
	now := time.Now()
	token, err := auth.Mint(key, cfg.issuer, cfg.clientID, claims, cfg.ttl, now)
	if err != nil {
		return errorf(std, "auth issue: %v", err)
	}
	fmt.Fprintln(std.out, token)
	// Said on stderr, so that stdout is the token alone and the lifetime
	// is seen without decoding it.
	fmt.Fprintf(std.err, "bub auth issue: token for clientId %q from issuer %q, valid until %s\n", cfg.clientID, cfg.issuer, now.Add(cfg.ttl).UTC().Format(time.RFC3339))
	return 0
}
