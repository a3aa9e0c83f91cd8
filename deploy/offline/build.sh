#!/usr/bin/env bash
# Builds the third-party images compose.yaml uses, from the Go module proxy, into
# FROM-scratch images tagged with their official names, so a machine that cannot pull
# finds them locally (one with internet pulls the official ones instead):
#   quay.io/coreos/etcd:$ETCD_VERSION   etcd + etcdctl (wrapper module ./etcd)
#   nats:$NATS_VERSION                  nats-server (go install)
#   jaegertracing/jaeger:$JAEGER_VERSION Jaeger v2 (wrapper module ./jaeger)
#   coredns/coredns:$COREDNS_VERSION     CoreDNS, unmodified (go install)
#   rancher/local-path-provisioner:$LOCAL_PATH_PROVISIONER_VERSION
#                                        the provisioner of deploy/local-path-provisioner.yaml
#                                        (go install)
#   busybox:latest                       Debian's static busybox (scripts/busybox.sh), the
#                                        image of local-path-provisioner's helper pods
# An image whose tag already exists is kept: delete it (docker rmi) to rebuild it.
# Binaries are static (CGO_ENABLED=0), built on the host; docker build needs no base
# image but scratch. For skiff's own containerd, import them with
#   docker save NAME... | ctr -a skiff-data/containerd/containerd.sock -n k8s.io images import -
# Usage: build.sh [etcd|nats|jaeger|coredns|local-path-provisioner|busybox]...
# (default: etcd, nats, jaeger and coredns, what compose.yaml uses)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OFFLINE_BUILD_DIR:-$here/../.build/offline}

# Versions: ETCD_VERSION must match ./etcd/go.mod, JAEGER_MODULE_VERSION ./jaeger/go.mod.
ETCD_VERSION=v3.6.16
NATS_VERSION=2.15.2
JAEGER_VERSION=2.13.0
JAEGER_MODULE_VERSION=v1.76.0
# COREDNS_VERSION is the Makefile's COREDNS_VERSION without its v (the official tags have none).
COREDNS_VERSION=1.15.0
# The version deploy/local-path-provisioner.yaml names.
LOCAL_PATH_PROVISIONER_VERSION=v0.0.30

export CGO_ENABLED=0 GOWORK=off GOFLAGS=-trimpath
ldflags="-s -w"

# build NAME CONTEXT: docker build, showing the builder's output only when it fails
# (it warns on every run that the legacy builder is deprecated).
build() {
	local log
	if ! log=$(docker build --quiet -t "$1" "$2" 2>&1 >/dev/null); then
		echo "$log" >&2
		exit 1
	fi
}

# image NAME DOCKERFILE CONTEXT: docker build, tagging NAME.
image() {
	cp "$here/$2" "$3/Dockerfile"
	build "$1" "$3"
	echo "built $1 ($(docker image inspect -f '{{.Size}}' "$1" | awk '{printf "%.0f MB", $1/1e6}'))"
}

# present NAME: whether the image exists, so it is not built again.
present() {
	if docker image inspect "$1" >/dev/null 2>&1; then
		echo "$1: present, kept"
		return 0
	fi
	return 1
}

build_etcd() {
	local name=quay.io/coreos/etcd:$ETCD_VERSION dir=$out/etcd
	present "$name" && return
	mkdir -p "$dir"
	(cd "$here/etcd" &&
		go build -ldflags "$ldflags" -o "$dir/etcd" . &&
		go build -ldflags "$ldflags" -o "$dir/etcdctl" go.etcd.io/etcd/etcdctl/v3)
	image "$name" etcd.Dockerfile "$dir"
}

build_nats() {
	local name=nats:$NATS_VERSION dir=$out/nats
	present "$name" && return
	mkdir -p "$dir"
	GOBIN=$dir go install -ldflags "$ldflags" "github.com/nats-io/nats-server/v2@v$NATS_VERSION"
	cp "$here/nats-server.conf" "$dir/"
	image "$name" nats.Dockerfile "$dir"
}

build_jaeger() {
	local name=jaegertracing/jaeger:$JAEGER_VERSION dir=$out/jaeger
	present "$name" && return
	mkdir -p "$dir/tmp"
	chmod 1777 "$dir/tmp"
	(cd "$here/jaeger" &&
		go build -ldflags "$ldflags -X github.com/jaegertracing/jaeger/internal/version.latestVersion=v$JAEGER_VERSION" \
			-o "$dir/jaeger" github.com/jaegertracing/jaeger/cmd/jaeger)
	image "$name" jaeger.Dockerfile "$dir"
}

build_coredns() {
	local name=coredns/coredns:$COREDNS_VERSION dir=$out/coredns
	present "$name" && return
	mkdir -p "$dir"
	GOBIN=$dir go install -ldflags "$ldflags" "github.com/coredns/coredns@v$COREDNS_VERSION"
	image "$name" coredns.Dockerfile "$dir"
}

build_local_path_provisioner() {
	local name=rancher/local-path-provisioner:$LOCAL_PATH_PROVISIONER_VERSION dir=$out/local-path-provisioner
	present "$name" && return
	mkdir -p "$dir"
	# main.VERSION as the official build sets it (its --version).
	GOBIN=$dir go install -ldflags "$ldflags -X main.VERSION=$LOCAL_PATH_PROVISIONER_VERSION" \
		"github.com/rancher/local-path-provisioner@$LOCAL_PATH_PROVISIONER_VERSION"
	image "$name" local-path-provisioner.Dockerfile "$dir"
}

build_busybox() {
	local name=busybox:latest dir=$out/busybox
	present "$name" && return
	mkdir -p "$dir"
	"$here/../../scripts/busybox.sh" "$dir/busybox"
	image "$name" busybox.Dockerfile "$dir"
}

[ $# -gt 0 ] || set -- etcd nats jaeger coredns
for what in "$@"; do
	case $what in
	etcd) build_etcd ;;
	nats) build_nats ;;
	jaeger) build_jaeger ;;
	coredns) build_coredns ;;
	local-path-provisioner) build_local_path_provisioner ;;
	busybox) build_busybox ;;
	*)
		echo "build.sh: unknown image $what (want etcd, nats, jaeger, coredns, local-path-provisioner or busybox)" >&2
		exit 2
		;;
	esac
done
