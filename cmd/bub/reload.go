package main

import (
	"crypto/tls"
	"flag"
	"fmt"
	"log/slog"

	"github.com/bub-bus/bub/auth"
	"github.com/bub-bus/bub/bus"
)

// reloader applies a SIGHUP: the configuration file's auth and limits
// sections and the TLS files take effect without a restart; any other
// change is only reported, since the listener, the store and the
// bus's options are fixed at start.
type reloader struct {
	args    []string
	log     *slog.Logger
	srv     *bus.Server
	certs   *certStore    // nil without TLS
	a2a     *a2aDoor      // nil without --a2a-config
	started *flag.FlagSet // the settings serve started with

	// What a reload may change, as in force now.
	limits  bus.Limits
	hasAuth bool

	// What the open-bus check needs; both need a restart to change.
	listen         string
	allowAnonymous bool
}

// reload logs its outcome; a failed reload has changed nothing.
func (r *reloader) reload() {
	if err := r.apply(); err != nil {
		r.log.Error("configuration reload failed; nothing changed", "err", err)
	}
}

// apply loads and checks everything first and only then swaps, so that
// an invalid file, a bad key file or an unreadable certificate leaves the
// bus exactly as it was.
func (r *reloader) apply() error {
	cfg, fs, err := loadServeConfig(r.args)
	if err != nil {
		return err
	}
	if err := checkOpenBus(r.listen, cfg.hasAuth(), r.allowAnonymous); err != nil {
		return fmt.Errorf("the file has no auth: section: %w", err)
	}
	authn, err := loadAuth(cfg)
	if err != nil {
		return err
	}
	var tlsCfg *tls.Config
	if r.certs != nil {
		files := cfg.tlsFiles()
		if !files.enabled() {
			// Turning TLS off needs a restart; until then keep serving
			// the files in force.
			files = tlsFilesOf(r.started)
		}
		if tlsCfg, err = files.load(); err != nil {
			return err
		}
	}

	// Everything is valid: apply.
	if authn != nil || r.hasAuth {
		r.srv.SetAuth(authn)
		r.a2a.setAuth(authn)
	}
	limitsChanged := cfg.limits != r.limits
	if limitsChanged {
		r.srv.SetLimits(cfg.limits)
	}
	if tlsCfg != nil {
		r.certs.current.Store(tlsCfg)
	}
	r.limits, r.hasAuth = cfg.limits, authn != nil

	if stale := r.needRestart(fs); len(stale) > 0 {
		r.log.Warn("changed settings take effect only after a restart", "keys", stale)
	}
	var a auth.Config
	file := ""
	if cfg.file != nil {
		file = cfg.file.path
		if cfg.file.auth != nil {
			a = *cfg.file.auth
		}
	}
	r.log.Info("configuration reloaded", "file", file, "identities", len(a.Identities), "issuers", len(a.Issuers), "anonymous", a.Anonymous != nil, "limits_changed", limitsChanged, "tls_reloaded", tlsCfg != nil)
	if authn == nil {
		r.log.Warn(noAuthWarning)
	}
	return nil
}

// needRestart lists the file keys of the settings that differ from those
// serve started with and that a reload does not apply.
func (r *reloader) needRestart(fs *flag.FlagSet) []string {
	var stale []string
	fs.VisitAll(func(f *flag.Flag) {
		if limitFlags[f.Name] || notFileKeys[f.Name] || f.Name == "max-token-lifetime" {
			return // reloaded, or not a setting
		}
		if r.certs != nil && (f.Name == "tls-cert" || f.Name == "tls-key" || f.Name == "tls-client-ca") && cfgHasTLS(fs) {
			return // reloaded from their new paths
		}
		if old := r.started.Lookup(f.Name); old != nil && old.Value.String() != f.Value.String() {
			stale = append(stale, fileKey(f.Name))
		}
	})
	return stale
}

func tlsFilesOf(fs *flag.FlagSet) tlsFiles {
	get := func(name string) string { return fs.Lookup(name).Value.String() }
	return tlsFiles{cert: get("tls-cert"), key: get("tls-key"), clientCA: get("tls-client-ca")}
}

func cfgHasTLS(fs *flag.FlagSet) bool { return tlsFilesOf(fs).enabled() }
