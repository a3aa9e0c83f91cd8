#!/usr/bin/env bash
# run.sh: Kubernetes' conformance suite (e2e.test and ginkgo from build.sh, the images
# from images.sh) against the two-node skiff of cluster.sh, which it brings up first and
# always takes down. The specs FOCUS selects run in two passes, as upstream's conformance
# image runs them: those ginkgo may run in parallel ($PROCS processes), then the
# [Serial] ones one at a time, [Disruptive] ones included (two taint a node to see its
# pods evicted).
# Each pass writes its JUnit report under $RESULTS; then tests/conformance/report turns
# them into $REPORT (docs/conformance.md for a whole run).
#
# Environment:
#   CONFORMANCE_DIR  where build.sh and images.sh put e2e.test, ginkgo and the images
#   FOCUS            regular expression of the specs to run (default '\[Conformance\]')
#   FOCUS_FILE       instead of FOCUS: a file of whole spec names, one per line (# comments)
#   SKIP             regular expression of specs not to run (default none)
#   PROCS            parallel ginkgo processes of the first pass (default 8)
#   TIMEOUT          ginkgo's limit for the parallel pass (default 3h); specs still
#                    running then are reported as interrupted, those not started as skipped
#   SERIAL_TIMEOUT   the same for the [Serial] pass (default TIMEOUT)
#   RESULTS          JUnit reports and ginkgo's output (default $CONFORMANCE_DIR/results)
#   REPORT           the markdown report to write ("" = none; default docs/conformance.md)
#   EXPECT           a file of spec names that must pass (FOCUS_FILE's format): the run
#                    fails if one did not
#   KEEP_CLUSTER=1   leave the cluster up afterwards (cluster.sh down stops it)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=${CONFORMANCE_DIR:?CONFORMANCE_DIR names the directory build.sh and images.sh fill}
version=${K8S_VERSION:-v1.32.4}
export CLUSTER_DIR=${CLUSTER_DIR:-$dir/cluster}
results=${RESULTS:-$dir/results}
report=${REPORT-$root/docs/conformance.md}
procs=${PROCS:-8}
timeout=${TIMEOUT:-3h}
serial_timeout=${SERIAL_TIMEOUT:-$timeout}
skip=${SKIP:-}
go=${GO:-go}

# names_regexp FILE: one regular expression matching exactly the spec names FILE lists
# (ginkgo matches it against a spec's full text, which has more before the name).
names_regexp() {
	grep -v -e '^#' -e '^[[:space:]]*$' "$1" | sed -e 's/[][\\.^$*+?(){}|/]/\\&/g' -e 's/^/(^| )/' -e 's/$/$/' | paste -sd'|'
}

if [ -n "${FOCUS_FILE:-}" ]; then
	focus=$(names_regexp "$FOCUS_FILE")
else
	focus=${FOCUS:-'\[Conformance\]'}
fi
for f in e2e.test ginkgo; do
	[ -x "$dir/$f" ] || { echo "run.sh: $dir/$f missing: run scripts/conformance/build.sh" >&2; exit 1; }
done

cleanup() {
	if [ "${KEEP_CLUSTER:-}" = 1 ]; then
		echo "run.sh: cluster left up: KUBECONFIG=$CLUSTER_DIR/admin.kubeconfig; scripts/conformance/cluster.sh down stops it"
	else
		"$root/scripts/conformance/cluster.sh" down
	fi
}
"$root/scripts/conformance/cluster.sh" down >/dev/null 2>&1 || true
trap cleanup EXIT
"$root/scripts/conformance/cluster.sh" up
kubeconfig=$CLUSTER_DIR/admin.kubeconfig

rm -rf "$results"
mkdir -p "$results"
# pass NAME PROCS TIMEOUT LABEL-FILTER: one ginkgo run of e2e.test; its JUnit report is
# $results/junit_NAME.xml, its console output $results/NAME.log. The suite's failures
# are the report's business, not this script's: a failing spec does not stop it.
pass() {
	local name=$1 n=$2 limit=$3 labels=$4 start=$SECONDS rc=0
	echo "run.sh: $name pass: $n process(es), label filter '$labels' (console: $results/$name.log)"
	(cd "$results" && "$dir/ginkgo" --procs="$n" --timeout="$limit" --no-color -v \
		--focus="$focus" ${skip:+--skip="$skip"} --label-filter="$labels" \
		--output-dir="$results" --junit-report="junit_$name.xml" \
		"$dir/e2e.test" -- --kubeconfig="$kubeconfig" --provider=skeleton \
		--disable-log-dump) >"$results/$name.log" 2>&1 || rc=$?
	echo "run.sh: $name pass ended (exit $rc) after $(((SECONDS - start) / 60)) min: $(grep -E '^(Ran|PASS|FAIL)' "$results/$name.log" | paste -sd' ')"
}
pass parallel "$procs" "$timeout" '!Serial && !Disruptive'
pass serial 1 "$serial_timeout" 'Serial'

args=(-total 411 -k8s-version "$version" -commit "$(git -C "$root" rev-parse --short HEAD)"
	-reasons "$root/scripts/conformance/reasons.tsv" -header "$results/header.md")
{
	cat "$root/scripts/conformance/header.md"
	echo
	echo "This run: \`make test-conformance\` with PROCS=$procs parallel processes, limits of $timeout (parallel pass) and $serial_timeout ([Serial] pass)${FOCUS_FILE:+, the specs $FOCUS_FILE names}${FOCUS:+, FOCUS='$FOCUS'}${SKIP:+, SKIP='$SKIP'}, on $(nproc) CPU cores."
} >"$results/header.md"
[ -z "${EXPECT:-}" ] || args+=(-expect "$(realpath "$EXPECT")")
if [ -n "$report" ]; then
	args+=(-out "$report")
else
	args+=(-out /dev/null)
fi
junits=()
for f in "$results"/junit_parallel.xml "$results"/junit_serial.xml; do
	[ -s "$f" ] && junits+=("$f")
done
[ ${#junits[@]} -gt 0 ] || { echo "run.sh: no JUnit report written (see $results/*.log)" >&2; exit 1; }
(cd "$root/tests" && "$go" run ./conformance/report "${args[@]}" "${junits[@]}")
[ -z "$report" ] || echo "run.sh: wrote $report"
