# skiff: `make run` starts every service in one process; `make test` runs every test.
GO        ?= go
RUNTIME   ?= process
# skiff's state (etcd, PKI, admin kubeconfig) for run, up, down and clean:
# $SKIFF_DATA_DIR when set (as bin/skiff itself reads it), else ./skiff-data.
DATA_DIR  ?= $(or $(SKIFF_DATA_DIR),$(CURDIR)/skiff-data)
BIN       := $(CURDIR)/bin
GOTESTFLAGS ?= -count=1 -timeout 20m

FUZZTIME  ?= 10000x
# CoreDNS, run unmodified as the cluster DNS (bin/coredns for the all-in-one; the
# coredns/coredns image of deploy/offline/build.sh carries the same version).
COREDNS_VERSION ?= v1.15.0

.PHONY: all build run test test-unit test-e2e test-containerd test-fuzz bench bench-e2e vet fmt clean openapi proto proto-check coredns

all: build

## build: compile every service binary into bin/
build:
	cd services && $(GO) build -o $(BIN)/ ./cmd/...

## coredns: bin/coredns, CoreDNS COREDNS_VERSION from the Go module proxy (static), which
##          the all-in-one runs as its cluster DNS when it finds it beside bin/skiff;
##          built once (delete it to rebuild)
coredns: $(BIN)/coredns

$(BIN)/coredns:
	GOBIN=$(BIN) CGO_ENABLED=0 GOWORK=off GOFLAGS=-trimpath \
		$(GO) install -ldflags "-s -w" github.com/coredns/coredns@$(COREDNS_VERSION)

## run: start skiff (etcd, apiserver, scheduler, runtime, kubelet) in one process, its
##      state in DATA_DIR; RUNTIME=process (default) runs real host processes,
##      RUNTIME=sim simulates them, RUNTIME=containerd runs real containers in a
##      private containerd (run as root)
run:
	cd services && $(GO) build -o $(BIN)/skiff ./cmd/skiff
	$(BIN)/skiff --data-dir $(DATA_DIR) --runtime $(RUNTIME)

## test: vet, unit tests of every service, a bounded fuzz run, then the end-to-end suite
##       with the real kubectl
test: vet test-unit test-fuzz test-e2e

# The services' tests and the containerd suite (with the skiff it starts) run with
# client-go's cache mutation detector on, as kube's integration tests do: it panics when
# anything modifies an object an informer holds (the apiserver's RBAC authorizer holds
# its watch cache's own objects). The other end-to-end
# suites go without: its periodic deep comparisons, in the skiff they start, made
# tests/clientgo's timing-bound restart test (run beside them) relist.
TEST_ENV := KUBE_CACHE_MUTATION_DETECTOR=true

test-unit:
	cd services && $(TEST_ENV) $(GO) test $(GOTESTFLAGS) ./...

test-e2e: coredns
	cd tests && $(GO) test $(GOTESTFLAGS) $$($(GO) list ./... | grep -v /tests/containerd)

## test-containerd: the real-container suite (tests/containerd): skiff on a private
##                  containerd with CNI; as root, after scripts/install-containerd.sh
test-containerd: coredns
	cd tests && $(TEST_ENV) $(GO) test $(GOTESTFLAGS) ./containerd/

## test-fuzz: run each fuzz target (package:target) for FUZZTIME inputs (a count, Nx:
##            a duration can end in Go 1.26's spurious "context deadline exceeded",
##            golang/go#75804): request bodies per
##            content type, patches, list/watch/delete options, selectors, continue tokens
##            and resourceVersions, URL paths, Accept, bootstrap and service-account
##            tokens, CSRs, kubelet query parameters. Their committed corpora
##            (testdata/fuzz/) also run as plain tests in test-unit.
FUZZ_TARGETS := \
	apiserver/endpoints:FuzzDecodeBody apiserver/endpoints:FuzzDecodeJSON apiserver/endpoints:FuzzDecodeYAML \
	apiserver/endpoints:FuzzDecodeProtobuf apiserver/endpoints:FuzzListOptions apiserver/endpoints:FuzzApplyPatch \
	apiserver/endpoints:FuzzDeleteOptions apiserver/endpoints:FuzzResourcePath apiserver/endpoints:FuzzAccept \
	apiserver/storage:FuzzSelectionPredicate apiserver/storage/etcd3:FuzzDecodeContinue \
	apiserver/storage/etcd3:FuzzContinueRoundTrip apiserver/storage/etcd3:FuzzParseResourceVersion \
	apiserver/serviceaccount:FuzzVerify apiserver/authentication:FuzzBootstrapTokenHeader \
	internal/pki:FuzzParseBootstrapToken internal/pki:FuzzParseBootstrapTokens csrsigner:FuzzCSR \
	kubelet/server:FuzzLogOptions kubelet/server:FuzzStreamOptions
test-fuzz:
	cd services && for spec in $(FUZZ_TARGETS); do \
		pkg=$${spec%%:*}; target=$${spec##*:}; \
		$(GO) test -run='^$$' -fuzz="^$$target\$$" -fuzztime=$(FUZZTIME) ./$$pkg/ || exit 1; \
	done

## bench: the Go benchmarks of the storage layers
bench:
	cd services && $(GO) test -run='^$$' -bench=. -benchmem ./apiserver/...

## openapi: regenerate services/apiserver/openapi (the schemas /openapi/v3 serves and
##          server-side apply uses) with openapi-gen at go.mod's kube-openapi version
OPENAPI_PACKAGES := k8s.io/api/core/v1 k8s.io/api/apps/v1 k8s.io/api/batch/v1 k8s.io/api/autoscaling/v1 k8s.io/api/autoscaling/v2 \
	k8s.io/api/rbac/v1 k8s.io/api/scheduling/v1 k8s.io/api/scheduling/v1alpha3 k8s.io/api/coordination/v1 k8s.io/api/certificates/v1 \
	k8s.io/api/authentication/v1 k8s.io/api/authorization/v1 k8s.io/api/discovery/v1 k8s.io/api/policy/v1 \
	k8s.io/api/events/v1 k8s.io/api/flowcontrol/v1 k8s.io/api/node/v1 k8s.io/api/networking/v1 k8s.io/api/admissionregistration/v1 k8s.io/api/storage/v1 \
	k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1 k8s.io/kube-aggregator/pkg/apis/apiregistration/v1 \
	k8s.io/apimachinery/pkg/apis/meta/v1 k8s.io/apimachinery/pkg/runtime k8s.io/apimachinery/pkg/util/intstr \
	k8s.io/apimachinery/pkg/api/resource k8s.io/apimachinery/pkg/version
openapi:
	cd services && $(GO) run k8s.io/kube-openapi/cmd/openapi-gen@$$($(GO) list -m -f '{{.Version}}' k8s.io/kube-openapi) \
		--go-header-file /dev/null --report-filename /dev/null \
		--output-dir apiserver/openapi --output-pkg skiff.dev/services/apiserver/openapi \
		--output-file zz_generated.openapi.go $(OPENAPI_PACKAGES)

## proto: regenerate the Go code of skiff's own gRPC APIs (proto/**/*.proto, the Go
##        module skiff.dev/proto) with Debian's protoc, protoc-gen-go and
##        protoc-gen-go-grpc (scripts/install-protoc.sh installs them)
proto:
	scripts/proto.sh

## proto-check: fail when the committed generated code is not what `make proto` gives
##              (generates into a temporary directory and diffs; CI runs it)
proto-check:
	scripts/proto.sh --check

## bench-e2e: skiff with simulated containers and 100 hollow nodes, then skiff-bench:
##            1,000 and 5,000 pods from 50 creators, one JSON line each. With
##            BENCH_KUBECONFIG=path, the same runs against that cluster (any Kubernetes-compatible one).
##            HOLLOW_PROCESS=separate runs the hollow nodes in their own process, with
##            HOLLOW_FLAGS added to its kubelet flags (e.g. --evented-pleg=false) and its
##            state under HOLLOW_ROOT_DIR when set (e.g. /dev/shm: the disk out of the figures);
##            SKIFF_FLAGS adds skiff flags (e.g. "--profiling --health-address 127.0.0.1:6060").
bench-e2e:
	GO="$(GO)" BIN="$(BIN)" scripts/bench-e2e.sh

vet:
	cd proto && $(GO) vet ./...
	cd services && $(GO) vet ./...
	cd tests && $(GO) vet ./...

fmt:
	gofmt -w services tests proto

clean:
	rm -rf $(BIN) $(DATA_DIR)

# ---- the full stack in containers (compose.yaml; docs/operations.md, "Run the full stack") ----
COMPOSE         ?= $(shell docker compose version >/dev/null 2>&1 && echo "docker compose" || echo docker-compose)
COMPOSE_PROJECT ?= skiff
KUBELETS        ?= 3

.PHONY: images offline-images up down test-compose test-faults

## images: one FROM-scratch image per skiff service (skiff/<service>:dev) from
##         deploy/*.Dockerfile, out of static binaries built on the host
images:
	GO="$(GO)" scripts/images.sh

## offline-images: etcd, NATS, Jaeger and CoreDNS built from the Go module proxy into images with
##                 their official names, for a machine that cannot pull; kept once built
offline-images:
	deploy/offline/build.sh

## up: start the stack with KUBELETS kubelets (3) and print the kubeconfig and Jaeger URL;
##     run `make offline-images` first where no registry is reachable
up: images
	mkdir -p $(DATA_DIR)
	SKIFF_DATA_DIR=$(DATA_DIR) SKIFF_UID=$$(id -u) SKIFF_GID=$$(id -g) \
		$(COMPOSE) -p $(COMPOSE_PROJECT) up -d --scale kubelet=$(KUBELETS)
	@echo "export KUBECONFIG=$(DATA_DIR)/admin.kubeconfig"
	@echo "Jaeger: http://$${SKIFF_PUBLISH_ADDRESS:-127.0.0.1}:$${SKIFF_JAEGER_PORT:-16686}"

## down: stop the stack and delete its containers, network and volumes
down:
	SKIFF_DATA_DIR=$(DATA_DIR) $(COMPOSE) -p $(COMPOSE_PROJECT) down -v --remove-orphans

## test-compose: the compose end-to-end suite (tests/compose) on the images above
test-compose: images offline-images
	cd tests && SKIFF_COMPOSE_TEST=1 COMPOSE="$(COMPOSE)" $(GO) test -count=1 -timeout 40m -v ./compose/

## test-faults: the fault matrix (tests/faults) on the same images: compose.yaml's stack
##              with sim kubelets, each fault struck while pods are created; prints the
##              table of docs/reliability.md. FAULTS_PODS (90 a row) sets the size.
test-faults: images offline-images
	cd tests && SKIFF_FAULTS_TEST=1 COMPOSE="$(COMPOSE)" $(GO) test -count=1 -timeout 40m -v ./faults/

# ---- Kubernetes' conformance suite (docs/conformance.md) ----
K8S_VERSION     ?= v1.32.4
CONFORMANCE_DIR ?= $(HOME)/.cache/skiff-conformance
CONFORMANCE_ENV := CONFORMANCE_DIR=$(CONFORMANCE_DIR) K8S_VERSION=$(K8S_VERSION) GO="$(GO)"

.PHONY: conformance-build test-conformance test-conformance-ci

## conformance-build: e2e.test and ginkgo of K8S_VERSION from the Go module proxy, and the
##                    test images it runs, built offline, into CONFORMANCE_DIR (kept once built)
conformance-build:
	$(CONFORMANCE_ENV) scripts/conformance/build.sh
	$(CONFORMANCE_ENV) scripts/conformance/images.sh

## test-conformance: the [Conformance] specs of K8S_VERSION's e2e suite against a two-node
##                   skiff on containerd (as root, after scripts/install-containerd.sh);
##                   regenerates docs/conformance.md. FOCUS, SKIP and PROCS narrow or widen it
test-conformance: build coredns conformance-build
	$(CONFORMANCE_ENV) scripts/conformance/run.sh

## test-conformance-ci: the slice CI runs: the specs tests/conformance/ci-focus.txt names
##                      (they need only the pause, busybox and agnhost images, the only
##                      ones built), each of which must pass; docs/conformance.md is left
##                      as it is
CI_IMAGES := pause busybox agnhost
test-conformance-ci: build coredns
	$(CONFORMANCE_ENV) scripts/conformance/build.sh
	$(CONFORMANCE_ENV) CONFORMANCE_IMAGES="$(CI_IMAGES)" scripts/conformance/images.sh
	$(CONFORMANCE_ENV) FOCUS_FILE=tests/conformance/ci-focus.txt EXPECT=tests/conformance/ci-focus.txt \
		REPORT= scripts/conformance/run.sh
