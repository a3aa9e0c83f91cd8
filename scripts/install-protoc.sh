#!/usr/bin/env bash
# install-protoc.sh: CI's install step for `make proto` / `make proto-check`: Debian's
# protoc (protobuf-compiler) and its Go plugins, protoc-gen-go (APIv2,
# google.golang.org/protobuf) and protoc-gen-go-grpc. The committed code under proto/ was
# generated with exactly these (Debian 12: protoc 3.21.12, protoc-gen-go v1.28.1,
# protoc-gen-go-grpc 1.0); scripts/proto.sh refuses other versions, since their output
# differs and the check would fail on a diff that says nothing about the .proto files.
set -euo pipefail
if ! command -v protoc >/dev/null || ! command -v protoc-gen-go >/dev/null || ! command -v protoc-gen-go-grpc >/dev/null; then
	sudo=""
	[ "$(id -u)" -eq 0 ] || sudo=sudo
	$sudo apt-get update
	$sudo apt-get install -y --no-install-recommends protobuf-compiler protoc-gen-go protoc-gen-go-grpc
fi
"$(dirname "$0")/proto.sh" --versions
