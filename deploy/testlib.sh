# What deploy/compose-test.sh and deploy/cluster-test.sh share; each
# sets name (its prefix in the output) and started (date +%s) first.

# step WHAT...: says what the test does now, with the seconds so far.
# last_step keeps it for a trap that reports a failure.
step() {
	last_step="$* ($(($(date +%s) - started))s)"
	echo "$name: $last_step"
}

# fail WHY...: ends the test (the EXIT trap tears down).
# failure keeps WHY for the trap's last line.
fail() {
	failure="$*"
	echo "$name: $*" >&2
	exit 1
}

# wait_for SECONDS WHAT COMMAND...: runs COMMAND until it succeeds.
wait_for() {
	local limit=$1 what=$2
	shift 2
	local deadline=$(($(date +%s) + limit))
	until "$@" >/dev/null 2>&1; do
		[ "$(date +%s)" -lt "$deadline" ] || fail "timed out after ${limit}s waiting for $what"
		sleep 0.5
	done
}
