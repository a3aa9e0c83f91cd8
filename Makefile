# skiff: `make run` starts every service in one process; `make test` runs every test.
GO        ?= go
RUNTIME   ?= process
DATA_DIR  ?= $(CURDIR)/skiff-data
BIN       := $(CURDIR)/bin
GOTESTFLAGS ?= -count=1 -timeout 20m

FUZZTIME  ?= 10s

.PHONY: all build run test test-unit test-e2e test-fuzz bench vet fmt clean

all: build

## build: compile every service binary into bin/
build:
	cd services && $(GO) build -o $(BIN)/ ./cmd/...

## run: start skiff (etcd, apiserver, scheduler, runtime, kubelet) in one process;
##      RUNTIME=process (default) runs real host processes, RUNTIME=sim simulates them
run:
	cd services && $(GO) build -o $(BIN)/skiff ./cmd/skiff
	$(BIN)/skiff --data-dir $(DATA_DIR) --runtime $(RUNTIME)

## test: vet, unit tests of every service, a bounded fuzz run, then the end-to-end suite
##       with the real kubectl
test: vet test-unit test-fuzz test-e2e

test-unit:
	cd services && $(GO) test $(GOTESTFLAGS) ./...

test-e2e:
	cd tests && $(GO) test $(GOTESTFLAGS) ./...

## test-fuzz: run each fuzz target for FUZZTIME (request decoding, selectors, patches)
test-fuzz:
	cd services && for target in FuzzDecodeBody FuzzListOptions FuzzApplyPatch; do \
		$(GO) test -run='^$$' -fuzz="^$$target\$$" -fuzztime=$(FUZZTIME) ./apiserver/endpoints/ || exit 1; \
	done

## bench: the Go benchmarks of the storage layers
bench:
	cd services && $(GO) test -run='^$$' -bench=. -benchmem ./apiserver/...

vet:
	cd services && $(GO) vet ./...
	cd tests && $(GO) vet ./...

fmt:
	gofmt -w services tests

clean:
	rm -rf $(BIN) $(DATA_DIR)
