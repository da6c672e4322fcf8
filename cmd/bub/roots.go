package main

// The image is FROM scratch: there is no /etc/ssl/certs in it, so a bub
// that dials out over TLS (wss:// to a bus elsewhere, and the bridges'
// HTTPS APIs) would trust nothing. The fallback package embeds the
// Mozilla root set in the binary and registers it only when the system
// has no roots of its own, so on an ordinary host the system's roots (and
// any private CA installed there) still win. Embedding beats copying a
// bundle into the image: the binary works the same in any container or
// on any host, and the roots move with `go get` like any dependency,
// for about 250 KB. A private CA on a scratch image: set SSL_CERT_FILE to
// a mounted bundle, which Go reads before falling back.
import _ "golang.org/x/crypto/x509roots/fallback"
