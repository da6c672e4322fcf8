#!/bin/sh
# build-progress.sh OUT PKG [FLAG...]: go build FLAG... -o OUT PKG, saying how far it has
# got. A first build compiles a few hundred packages (NATS, Prometheus,
# the standard library) for minutes; go build prints nothing meanwhile,
# and with -v a line per package. This prints one line every few
# packages, with the count and the total the build may need, and passes
# errors through as go build prints them. The exit status is go build's.
set -u
out=$1 pkg=$2
shift 2
go=${GO:-go}
total=$($go list -deps "$pkg" 2>/dev/null | wc -l)
start=$(date +%s)
{ $go build -v "$@" -o "$out" "$pkg" 2>&1; echo "go-build-exit $?"; } | awk -v total="$total" -v start="$start" '
	/^go-build-exit [0-9]+$/ { code = $2; next }
	# go build -v names each package it compiles, one import path a line.
	/^[A-Za-z0-9._~\/-]+$/ {
		n++
		if (n == 1 || n % 20 == 0) {
			printf "  compiling: %d of at most %d packages (%s)\n", n, total, $0
			fflush()
		}
		next
	}
	{ print; fflush() }
	END {
		if (n > 0 && code == 0) {
			"date +%s" | getline now
			printf "  compiled %d packages in %ds\n", n, now - start
		}
		exit code
	}'
