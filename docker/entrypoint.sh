#!/bin/sh
# Entry point of the beam-probe container: `beam-probe check` on a schedule.
#
# Every BEAM_PROBE_INTERVAL seconds (default 60) it checks BEAM_PROBE_NODE,
# writes the node_exporter textfile BEAM_PROBE_TEXTFILE and appends to the
# history BEAM_PROBE_HISTORY (for the --trend rule). BEAM_PROBE_CHECK_ARGS
# adds options, e.g. "--cluster --warn binary=500MB --crit binary=1GiB".
# BEAM_PROBE_ONCE=1 runs one check and exits with its status (0-3), which
# is how the test suite runs this script directly.
#
# The cookie comes from BEAM_PROBE_COOKIE or RELEASE_COOKIE in the
# environment, never from the command line, where `ps` would show it.
set -u

: "${BEAM_PROBE_NODE:?set BEAM_PROBE_NODE to the node to check, e.g. app@host}"
interval="${BEAM_PROBE_INTERVAL:-60}"
textfile="${BEAM_PROBE_TEXTFILE:-/textfile/beam_probe.prom}"
history="${BEAM_PROBE_HISTORY:-/state/beam_probe_history.jsonl}"
probe="${BEAM_PROBE_BIN:-beam-probe}"

while :; do
    # shellcheck disable=SC2086  # the extra options are meant to split
    "$probe" check "$BEAM_PROBE_NODE" ${BEAM_PROBE_CHECK_ARGS:-} \
        --textfile "$textfile" --history "$history"
    status=$?
    if [ "${BEAM_PROBE_ONCE:-0}" = 1 ]; then
        exit "$status"
    fi
    sleep "$interval"
done
