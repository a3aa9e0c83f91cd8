#!/usr/bin/env bash
# Installs what `make test-containerd` and `make run RUNTIME=containerd` need, from
# Debian's packages: containerd, runc, the CNI plugins, and busybox-static (the test
# images are built from it). Nothing is started: skiff runs its own containerd.
set -euo pipefail
need=()
command -v containerd >/dev/null 2>&1 || need+=(containerd)
command -v runc >/dev/null 2>&1 || need+=(runc)
[ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
[ -x /bin/busybox ] || need+=(busybox-static)
command -v iptables >/dev/null 2>&1 || need+=(iptables)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need[@]}"
fi
