#!/usr/bin/env bash
# build.sh: e2e.test and ginkgo of Kubernetes $K8S_VERSION (v1.32.4), built from the Go
# module proxy into $CONFORMANCE_DIR (the Makefile's), kept once built. The module is
# k8s.io/kubernetes at that version with every staging module its go.mod maps to
# ./staging/src/... replaced by the published v0.<minor>.<patch> (sample-cli-plugin and
# sample-controller are not needed), as `go get` cannot follow a replace to a
# directory inside a module zip. The checksum database is not consulted (GOSUMDB=off):
# it may be unreachable.
set -euo pipefail
version=${K8S_VERSION:-v1.32.4}
dir=${CONFORMANCE_DIR:?CONFORMANCE_DIR names where e2e.test and ginkgo go}
go=${GO:-go}
if [ -x "$dir/e2e.test" ] && [ -x "$dir/ginkgo" ]; then
	echo "$dir: e2e.test and ginkgo of $version present, kept"
	exit 0
fi
export GOWORK=off GOSUMDB=off GOFLAGS=-mod=mod CGO_ENABLED=0
mod=$dir/module
mkdir -p "$mod"
cd "$mod"
gomod=$("$go" mod download -json "k8s.io/kubernetes@$version" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')
staging=${version/v1./v0.}
{
	echo "module skiff.dev/conformance"
	echo
	echo "go 1.23.0"
	echo
	echo "require k8s.io/kubernetes $version"
	echo
	sed -n 's#^[[:space:]]*\(k8s.io/[^ ]*\) => \./staging/src/.*#\1#p' "$gomod" |
		grep -v -e sample-cli-plugin -e sample-controller |
		while read -r m; do echo "replace $m => $m $staging"; done
} >go.mod
echo "building e2e.test and ginkgo of Kubernetes $version in $dir (a few minutes)"
"$go" get -t "k8s.io/kubernetes/test/e2e@$version" >/dev/null 2>&1 || "$go" get -t "k8s.io/kubernetes/test/e2e@$version"
"$go" test -c -ldflags "-s -w" -o "$dir/e2e.test" k8s.io/kubernetes/test/e2e
"$go" build -ldflags "-s -w" -o "$dir/ginkgo" github.com/onsi/ginkgo/v2/ginkgo
echo "built $dir/e2e.test ($(du -m "$dir/e2e.test" | cut -f1) MB) and $dir/ginkgo"
