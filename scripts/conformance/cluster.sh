#!/usr/bin/env bash
# cluster.sh: the two-node skiff the conformance suite runs against, on real containers,
# as a user would start it on one host:
#
#   node 1  bin/skiff --runtime containerd: etcd, NATS, the apiserver, the scheduler, the
#           controller manager, csr-signer, exec-proxy, the proxy, CoreDNS and a kubelet
#           on a private containerd (bridge skiff0, pod CIDR 10.244.0.0/24)
#   node 2  bin/kubelet joined with a bootstrap token (`skiff token create`), on its own
#           private containerd (`skiff containerd`, bridge skiff1) with the pod CIDR the
#           controller manager allocates it (10.244.1.0/24); its serving certificate
#           request is approved here, as an administrator does (`kubectl certificate
#           approve`): it names the host's address, which the signer never approves on
#           its own for a kubelet.
#
# Every listener binds $NODE_IP, an address of its own on an empty bridge (skiffconf0),
# so that pods reach the apiserver (the kubernetes Service's endpoint) and each other's
# nodes through the host, while nothing listens on the machine's real interfaces. Both
# containerds get the conformance images (scripts/conformance/images.sh) imported
# before any pod is scheduled.
#
# Usage: cluster.sh up     start it (state, logs and kubeconfig under $CLUSTER_DIR)
#        cluster.sh down   stop it and remove its state, interface and bridges
# The admin kubeconfig is $CLUSTER_DIR/admin.kubeconfig once `up` returns. Needs root,
# containerd, runc, the CNI plugins (scripts/install-containerd.sh), nft, and bin/skiff,
# bin/kubelet and bin/coredns (make build coredns).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=${CONFORMANCE_DIR:?CONFORMANCE_DIR names the directory build.sh and images.sh fill}
cluster=${CLUSTER_DIR:-$dir/cluster}
bin=${BIN:-$root/bin}
NODE_IP=${NODE_IP:-10.200.0.1}
iface=skiffconf0
pause=registry.k8s.io/pause:3.10
node1=skiff-node-1
node2=skiff-node-2

log() { echo "cluster.sh: $*"; }
die() {
	echo "cluster.sh: $*" >&2
	exit 1
}

# wait_for SECONDS WHAT COMMAND...: COMMAND succeeds within SECONDS, or die.
wait_for() {
	local secs=$1 what=$2
	shift 2
	local end=$((SECONDS + secs))
	until "$@" >/dev/null 2>&1; do
		[ $SECONDS -lt $end ] || die "$what: not within ${secs}s (logs in $cluster)"
		sleep 1
	done
}

# import SOCKET: every conformance image archive into the containerd at SOCKET.
import() {
	local f
	for f in "$dir"/images/*.tar; do
		ctr -a "$1" -n k8s.io images import "$f" >/dev/null ||
			die "ctr images import $f into $1"
	done
}

kubectl() { command kubectl --kubeconfig "$cluster/admin.kubeconfig" "$@"; }

up() {
	[ "$(id -u)" = 0 ] || die "run as root (containerd, bridges, nftables)"
	for b in skiff kubelet coredns; do
		[ -x "$bin/$b" ] || die "$bin/$b missing (make build coredns)"
	done
	ls "$dir"/images/*.tar >/dev/null 2>&1 || die "no images in $dir/images (scripts/conformance/images.sh)"
	[ ! -e "$cluster/skiff.pid" ] || die "$cluster holds a running cluster: cluster.sh down first"
	rm -rf "$cluster"
	mkdir -p "$cluster/node-2"

	ip link show "$iface" >/dev/null 2>&1 || ip link add "$iface" type bridge
	ip addr replace "$NODE_IP/32" dev "$iface"
	ip link set "$iface" up

	log "node 1: skiff all-in-one on containerd at $NODE_IP (log $cluster/skiff.log)"
	setsid "$bin/skiff" --data-dir "$cluster/skiff" --runtime containerd --bind-address "$NODE_IP" \
		--node-name "$node1" --pod-cidr 10.244.0.0/24 --cluster-cidr 10.244.0.0/16 \
		--pod-infra-container-image "$pause" --coredns "$bin/coredns" \
		>"$cluster/skiff.out" 2>"$cluster/skiff.log" &
	echo $! >"$cluster/skiff.pid"
	local sock1=$cluster/skiff/containerd/containerd.sock
	wait_for 180 "node 1's containerd" ctr -a "$sock1" version
	import "$sock1"
	wait_for 120 "skiff's admin kubeconfig" grep -q '^export KUBECONFIG=' "$cluster/skiff.out"
	cp "$(sed -n 's/^export KUBECONFIG=//p' "$cluster/skiff.out")" "$cluster/admin.kubeconfig"
	log "node 1 imported $(ls "$dir"/images/*.tar | wc -l) images"

	log "node 2: private containerd on bridge skiff1 (log $cluster/node-2/containerd.log)"
	setsid "$bin/skiff" containerd --dir "$cluster/node-2/containerd" --bridge skiff1 \
		--pod-infra-container-image "$pause" >"$cluster/node-2/containerd.out" 2>"$cluster/node-2/containerd.log" &
	echo $! >"$cluster/node-2/containerd.pid"
	local sock2=$cluster/node-2/containerd/containerd.sock
	wait_for 180 "node 2's containerd" grep -q '^endpoint:' "$cluster/node-2/containerd.out"
	import "$sock2"

	"$bin/skiff" token create --kubeconfig "$cluster/admin.kubeconfig" --ttl 1h \
		--description "conformance node $node2" --bootstrap-kubeconfig "$cluster/node-2/bootstrap.kubeconfig" >/dev/null
	log "node 2: kubelet $node2 joining with a bootstrap token (log $cluster/node-2/kubelet.log)"
	local nats
	nats=$(sed -n 's/^# events: NATS at //p' "$cluster/skiff.out")
	setsid "$bin/kubelet" --node-name "$node2" --node-ip "$NODE_IP" --address "$NODE_IP" --port 10251 \
		--bootstrap-kubeconfig "$cluster/node-2/bootstrap.kubeconfig" \
		--kubeconfig "$cluster/node-2/kubelet.kubeconfig" --root-dir "$cluster/node-2/kubelet" \
		--container-runtime-endpoint "unix://$sock2" --cluster-dns 10.96.0.10 \
		${nats:+--nats-url "$nats"} --health-address 127.0.0.1:10268 \
		>"$cluster/node-2/kubelet.out" 2>"$cluster/node-2/kubelet.log" &
	echo $! >"$cluster/node-2/kubelet.pid"
	approve_serving
	wait_for 120 "both nodes Ready" kubectl wait --for=condition=Ready "node/$node1" "node/$node2" --timeout=5s
	# The suite waits for kube-system's pods and checks the nodes are schedulable.
	kubectl get nodes -o wide
	log "up: export KUBECONFIG=$cluster/admin.kubeconfig"
}

# approve_serving: approves node 2's kubelet-serving request once it is there.
approve_serving() {
	local end=$((SECONDS + 120)) csr
	while [ $SECONDS -lt $end ]; do
		csr=$(kubectl get csr -o jsonpath='{range .items[?(@.spec.signerName=="kubernetes.io/kubelet-serving")]}{.metadata.name} {.spec.username} {.status.conditions[0].type}{"\n"}{end}' 2>/dev/null |
			awk -v u="system:node:$node2" '$2 == u && $3 == "" { print $1 }')
		if [ -n "$csr" ]; then
			kubectl certificate approve $csr >/dev/null
			log "node 2: approved its serving certificate request $csr"
			return
		fi
		sleep 1
	done
	die "node 2 made no kubelet-serving request within 120s"
}

# stop PIDFILE: SIGTERM to the process group it names, SIGKILL after 90 s.
stop() {
	[ -s "$1" ] || return 0
	local pid
	pid=$(cat "$1")
	if kill -TERM -- "-$pid" 2>/dev/null; then
		for _ in $(seq 90); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 1
		done
		kill -KILL -- "-$pid" 2>/dev/null || true
	fi
	rm -f "$1"
}

down() {
	stop "$cluster/node-2/kubelet.pid"
	stop "$cluster/node-2/containerd.pid"
	stop "$cluster/skiff.pid"
	ip link delete "$iface" 2>/dev/null || true
	# Mounts a killed kubelet or containerd left behind, then the state.
	if [ -d "$cluster" ]; then
		grep -F " $cluster/" /proc/self/mounts | awk '{ print $2 }' | sort -r | xargs -r umount -l 2>/dev/null || true
		rm -rf "$cluster"
	fi
	log "down"
}

case ${1:-} in
up) up ;;
down) down ;;
*) die "usage: cluster.sh up|down" ;;
esac
