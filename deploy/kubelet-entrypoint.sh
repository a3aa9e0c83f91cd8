#!/bin/sh
# Starts the built-in CRI runtime ($SKIFF_RUNTIME: process or sim) on a unix socket, waits
# for the socket, then replaces itself with the kubelet, which gets this script's
# arguments. The node name is the container's host name unless --node-name is given, so
# `docker compose up --scale kubelet=N` makes N distinct nodes.
# Beside the kubelet it starts the proxy (skiff's kube-proxy), which runs as this node:
# once the kubelet has its client certificate through TLS bootstrap, the proxy uses the
# kubelet's kubeconfig ($SKIFF_PROXY_KUBECONFIG), so no node holds a key shared with
# other nodes. It programs this container's nftables and needs CAP_NET_ADMIN; where it
# cannot write rules it says so and exits, and the kubelet runs on without it (Services
# do not forward on this node). SKIFF_PROXY=false starts none.
set -eu
socket=/run/skiff/cri.sock
rm -f "$socket"
runtime --runtime "${SKIFF_RUNTIME:-process}" --listen "$socket" --root-dir /var/lib/skiff/runtime &
i=0
while [ ! -S "$socket" ]; do
	if ! kill -0 $! 2>/dev/null; then
		echo "kubelet-entrypoint: the $SKIFF_RUNTIME runtime exited" >&2
		exit 1
	fi
	i=$((i + 1))
	if [ "$i" -gt 300 ]; then
		echo "kubelet-entrypoint: no CRI socket at $socket after 30s" >&2
		exit 1
	fi
	sleep 0.1
done
if [ "${SKIFF_PROXY:-true}" != false ]; then
	proxy_kubeconfig=${SKIFF_PROXY_KUBECONFIG:-/var/lib/kubelet/kubeconfig}
	(
		while [ ! -s "$proxy_kubeconfig" ]; do sleep 0.5; done
		exec proxy --kubeconfig "$proxy_kubeconfig" --health-address 127.0.0.1:10256
	) &
fi
exec kubelet --container-runtime-endpoint "unix://$socket" "$@"
