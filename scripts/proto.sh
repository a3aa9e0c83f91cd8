#!/usr/bin/env bash
# proto.sh: generates the Go code of skiff's own gRPC APIs from proto/**/*.proto, beside
# each .proto file (proto/ is the Go module skiff.dev/proto; services imports it).
#
#   proto.sh            regenerate in place (make proto)
#   proto.sh --check    generate into a temporary directory and fail, showing the diff,
#                       when the committed code differs (make proto-check, run by CI)
#   proto.sh --versions check the tools' versions only
#
# Tools: Debian's protobuf-compiler, protoc-gen-go and protoc-gen-go-grpc
# (scripts/install-protoc.sh), at the versions the committed code names.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
want_protoc="libprotoc 3.21.12"
want_go="protoc-gen-go v1.28.1"
want_grpc="protoc-gen-go-grpc 1.0"

check_versions() {
	local got
	for tool in protoc protoc-gen-go protoc-gen-go-grpc; do
		command -v "$tool" >/dev/null || { echo "proto.sh: $tool is not installed: run scripts/install-protoc.sh" >&2; exit 1; }
	done
	got=$(protoc --version); [ "$got" = "$want_protoc" ] || { echo "proto.sh: protoc is \"$got\", want \"$want_protoc\" (Debian 12's protobuf-compiler)" >&2; exit 1; }
	got=$(protoc-gen-go --version); [ "$got" = "$want_go" ] || { echo "proto.sh: protoc-gen-go is \"$got\", want \"$want_go\" (Debian 12's protoc-gen-go)" >&2; exit 1; }
	got=$(protoc-gen-go-grpc --version); [ "$got" = "$want_grpc" ] || { echo "proto.sh: protoc-gen-go-grpc is \"$got\", want \"$want_grpc\" (Debian 12's protoc-gen-go-grpc)" >&2; exit 1; }
}

# generate OUT: every .proto under proto/, its Go code at the same relative path under OUT.
generate() {
	local out=$1
	(cd "$root/proto" && find . -name '*.proto' -printf '%P\n' | sort | xargs -r \
		protoc -I . --go_out="$out" --go_opt=paths=source_relative \
			--go-grpc_out="$out" --go-grpc_opt=paths=source_relative)
}

check_versions
case "${1:-}" in
--versions)
	echo "$want_protoc, $want_go, $want_grpc"
	;;
--check)
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	generate "$tmp"
	committed=$(mktemp -d)
	trap 'rm -rf "$tmp" "$committed"' EXIT
	(cd "$root/proto" && find . -name '*.pb.go' -printf '%P\n' | while read -r f; do
		mkdir -p "$committed/$(dirname "$f")" && cp "$f" "$committed/$f"; done)
	if ! diff -ru "$committed" "$tmp"; then
		echo "proto.sh: the generated code under proto/ is not what its .proto files give: run make proto and commit" >&2
		exit 1
	fi
	echo "proto: generated code is current"
	;;
"")
	generate "$root/proto"
	;;
*)
	echo "usage: proto.sh [--check | --versions]" >&2
	exit 2
	;;
esac
