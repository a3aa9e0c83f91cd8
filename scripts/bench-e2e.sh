#!/bin/sh
# bench-e2e: pod throughput and startup latency of a whole cluster (docs/performance.md).
#
# With BENCH_KUBECONFIG unset it builds skiff, starts it with simulated containers and
# HOLLOW_NODES hollow nodes, and runs skiff-bench twice: PODS pods from CREATORS clients,
# then SMALL_PODS pods. With HOLLOW_PROCESS=separate the hollow nodes run as their own
# `kubelet --hollow-nodes` process publishing its events to skiff's NATS, so skiff's
# figures are the control plane's alone, and
# HOLLOW_FLAGS adds kubelet flags to it (HOLLOW_FLAGS=--evented-pleg=false: relist every second),
# and HOLLOW_ROOT_DIR, when set, is a directory (with HOLLOW_PROCESS=separate) to keep the hollow nodes' state and pod
# volumes under instead of the run's temporary directory (a tmpfs such as /dev/shm takes
# the disk out of the hollow nodes' figures; it is emptied when the run ends).
# SKIFF_FLAGS adds flags to skiff's (SKIFF_FLAGS="--profiling --health-address
# 127.0.0.1:6060" serves /debug/pprof for the run).
# With BENCH_KUBECONFIG set it only runs skiff-bench, unchanged, against that cluster (any
# Kubernetes-compatible apiserver with nodes that run the pods). Prints one JSON line a run.
set -eu
GO=${GO:-go}
BIN=${BIN:-$(pwd)/bin}
PODS=${PODS:-5000}
SMALL_PODS=${SMALL_PODS:-1000}
CREATORS=${CREATORS:-50}
HOLLOW_NODES=${HOLLOW_NODES:-100}
HOLLOW_PROCESS=${HOLLOW_PROCESS:-inprocess}
HOLLOW_FLAGS=${HOLLOW_FLAGS:-}
HOLLOW_ROOT_DIR=${HOLLOW_ROOT_DIR:-}
SKIFF_FLAGS=${SKIFF_FLAGS:-}
(cd tests && $GO build -o "$BIN/" ./bench/cmd/skiff-bench)

bench() { # namespace pods [--pid name=PID ...]
	ns=$1 n=$2
	shift 2
	"$BIN/skiff-bench" --kubeconfig "$KUBECONFIG" --namespace "$ns" --pods "$n" --creators "$CREATORS" --timeout 15m "$@"
}

if [ -n "${BENCH_KUBECONFIG:-}" ]; then
	KUBECONFIG=$BENCH_KUBECONFIG
	bench bench-small "$SMALL_PODS"
	bench bench "$PODS"
	exit 0
fi

(cd services && $GO build -o "$BIN/" ./cmd/skiff ./cmd/kubelet)
data=$(mktemp -d)
hollow_root=$data/hollow
[ -z "$HOLLOW_ROOT_DIR" ] || hollow_root=$(mktemp -d "$HOLLOW_ROOT_DIR/skiff-hollow.XXXXXX")
pids=""
cleanup() {
	for pid in $pids; do kill -INT "$pid" 2>/dev/null || true; done
	for pid in $pids; do wait "$pid" 2>/dev/null || true; done
	rm -rf "$data" "$hollow_root"
}
trap cleanup EXIT INT TERM
inprocess=0
[ "$HOLLOW_PROCESS" = separate ] || inprocess=$HOLLOW_NODES
# shellcheck disable=SC2086 # $SKIFF_FLAGS is a list of flags
"$BIN/skiff" --data-dir "$data/skiff" --runtime sim --hollow-nodes "$inprocess" --node-name bench \
	--apiserver-port 0 --etcd-port 0 --exec-proxy-port 0 --kubelet-port 0 --nats-port 0 \
	--log-level warn $SKIFF_FLAGS >"$data/skiff.out" 2>"$data/skiff.log" &
skiff=$!
pids=$skiff
KUBECONFIG=$data/skiff/admin.kubeconfig
i=0
until grep -q '^export KUBECONFIG=' "$data/skiff.out" 2>/dev/null; do
	i=$((i + 1))
	[ "$i" -lt 1200 ] || { echo "bench-e2e: skiff did not start; its log:" >&2; tail -20 "$data/skiff.log" >&2; exit 1; }
	sleep 0.1
done
processes="--pid skiff=$skiff"
if [ "$HOLLOW_PROCESS" = separate ]; then
	# The hollow nodes publish their events to skiff's NATS, as its own kubelet does.
	nats_url=$(sed -n 's/^# events: NATS at //p' "$data/skiff.out")
	# shellcheck disable=SC2086 # $HOLLOW_FLAGS is a list of flags
	"$BIN/kubelet" --hollow-nodes "$HOLLOW_NODES" --bootstrap-kubeconfig "$data/skiff/kubelet/bootstrap-kubelet.kubeconfig" \
		--root-dir "$hollow_root" --nats-url "$nats_url" --log-level warn $HOLLOW_FLAGS 2>"$data/hollow.log" &
	pids="$! $pids"
	processes="$processes --pid hollow-nodes=$!"
fi
# Which of the all-in-one's shortcuts were on: its flags, for the record (one JSON line).
printf '{"skiff":{"flags":"--runtime sim --hollow-nodes %s %s","etcdInProcess":%s,"hollowProcess":"%s"}}\n' \
	"$inprocess" "$SKIFF_FLAGS" "$(case "$SKIFF_FLAGS" in *--etcd-in-process=false*) echo false ;; *) echo true ;; esac)" "$HOLLOW_PROCESS"
want=$((HOLLOW_NODES + 1))
i=0
until [ "$(kubectl --kubeconfig "$KUBECONFIG" get nodes --no-headers 2>/dev/null | grep -c ' Ready')" -ge "$want" ]; do
	i=$((i + 1))
	[ "$i" -lt 600 ] || { echo "bench-e2e: fewer than $want nodes Ready after 10 min" >&2; exit 1; }
	sleep 1
done
# shellcheck disable=SC2086 # $processes is a list of flags
bench bench-small "$SMALL_PODS" $processes
# shellcheck disable=SC2086
bench bench "$PODS" $processes
