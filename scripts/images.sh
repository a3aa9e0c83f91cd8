#!/usr/bin/env bash
# Builds skiff's images, one per service, from deploy/<service>.Dockerfile: the static
# Go binaries (CGO_ENABLED=0) are built on the host into deploy/.build/bin, with the
# healthcheck's probe (deploy/probe) and Debian's static busybox (scripts/busybox.sh; for
# the kubelet's process runtime and the pki service's shell) beside them, and the host's
# nft with its libraries for the kubelet image's proxy (scripts/nft.sh); each image is
# FROM scratch, so nothing is pulled.
# compose.yaml's build: sections use the same Dockerfiles and context, so after this
# script `docker compose up --build` builds the same images.
# Images: skiff/<service>:$SKIFF_TAG (default dev). A service whose main
# (services/cmd/<service>) does not exist yet is reported and skipped.
# SKIFF_SRC names another checkout to build the binaries from (default: this one).
# Usage: images.sh [service]... (default: every service)
set -euo pipefail
here=$(cd "$(dirname "$0")/../deploy" && pwd)
scripts=$(cd "$(dirname "$0")" && pwd)
root=$(cd "${SKIFF_SRC:-$here/..}" && pwd)
bin=$here/.build/bin
tag=${SKIFF_TAG:-dev}
GO=${GO:-go}

# binaries each image needs, by image name.
declare -A needs=(
	[skiff]="skiff"
	[apiserver]="apiserver"
	[scheduler]="scheduler"
	[controller-manager]="controller-manager"
	[csr-signer]="csr-signer"
	[exec-proxy]="exec-proxy"
	[kubelet]="kubelet runtime proxy"
)
[ $# -gt 0 ] || set -- skiff apiserver scheduler controller-manager csr-signer exec-proxy kubelet

mkdir -p "$bin"
"$scripts/busybox.sh" "$bin/busybox"
# The kubelet image's proxy drives nft: the host's, with its libraries (scripts/nft.sh).
"$scripts/nft.sh" "$here/.build/nft-root"
(cd "$here/probe" && GOWORK=off CGO_ENABLED=0 "$GO" build -trimpath -ldflags "-s -w" -o "$bin/probe" .)

for image in "$@"; do
	if [ -z "${needs[$image]+x}" ]; then
		echo "images.sh: unknown image $image" >&2
		exit 2
	fi
	missing=""
	pkgs=()
	for b in ${needs[$image]}; do
		if [ -d "$root/services/cmd/$b" ]; then
			pkgs+=("./cmd/$b")
		else
			missing="$missing services/cmd/$b"
		fi
	done
	if [ -n "$missing" ]; then
		echo "skiff/$image:$tag: skipped, no main yet:$missing"
		continue
	fi
	(cd "$root/services" && CGO_ENABLED=0 "$GO" build -trimpath -ldflags "-s -w" -o "$bin/" "${pkgs[@]}")
	if ! log=$(docker build --quiet -f "$here/$image.Dockerfile" -t "skiff/$image:$tag" "$here" 2>&1 >/dev/null); then
		echo "$log" >&2
		exit 1
	fi
	echo "built skiff/$image:$tag ($(docker image inspect -f '{{.Size}}' "skiff/$image:$tag" | awk '{printf "%.0f MB", $1/1e6}'))"
done

# A rebuild leaves the previous image untagged: delete those of ours.
docker image prune -f --filter label=dev.skiff.image=images.sh >/dev/null
