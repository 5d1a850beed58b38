# durashuffle: the README's commands.
GO ?= go
PKGS := ./... ./cmd/durashuffle/... ./store/azstore/... ./store/gcsstore/...
# Packages whose concurrency is worth the race detector's time.
RACE_PKGS := ./chunker ./uploader ./reader ./internal/hedge ./internal/retry ./internal/frame

.PHONY: run test test-endpoint vet build minio versitygw azurite fakegcs localkms docs clean

## run: the demo: write a stage on the embedded S3 server, read it back, verify.
## Built without the bench (-tags bench), so that a first run downloads
## none of its plotting, font and link-shaping modules.
run:
	$(GO) run ./cmd/durashuffle demo

## test: every test, MinIO- and versitygw-backed ones included (both are
## built once, then cached); the race detector's run is -short (smaller
## wide stages).
test: minio versitygw azurite fakegcs localkms vet
	bash scripts/gotest.sh -count=1 -timeout 20m $(PKGS)
	bash scripts/gotest.sh -count=1 -race -short -timeout 10m $(RACE_PKGS)

## soak: the fault matrices with 20 seeded runs each (make test runs 3 of
## the data path's and 1 per fault of the commands' on every store and the
## sidecar's).
.PHONY: soak
soak: minio azurite fakegcs
	DURASHUFFLE_SOAK_RUNS=20 $(GO) test -count=1 -timeout 30m -run '^TestFaultMatrix$$' -v ./internal/testkit/faulttest
	DURASHUFFLE_SOAK_RUNS=20 $(GO) test -count=1 -timeout 30m -run '^(TestCommandFaults|TestCommandGivesUp|TestCommandFaultsOnEveryStore)$$' -v ./cmd/durashuffle
	DURASHUFFLE_SOAK_RUNS=20 $(GO) test -count=1 -timeout 30m -run '^TestSidecarFaults$$' -v ./sidecar

## test-endpoint: the store contract suite and the end-to-end suites against
## ENDPOINT (LocalStack, AWS, a MinIO of your own) instead of a MinIO they
## start: make test-endpoint ENDPOINT=http://127.0.0.1:4566 [REGION=...]
## [PATH_STYLE=false] [INSECURE=true]; BUCKET=one-existing-bucket only with
## ENDPOINT_PKGS=./store/storetest. Credentials come from the AWS chain.
## See docs/operations.md.
ENDPOINT_PKGS ?= ./store/storetest ./internal/s3store ./internal/testkit/e2e ./reader ./cmd/durashuffle
# NAME from the command line, else DURASHUFFLE_TEST_NAME from the
# environment: a BUCKET or REGION exported for other tools is not picked up.
testenv_var = $(if $(filter command line,$(origin $(1))),$($(1)),$(DURASHUFFLE_TEST_$(1)))
test-endpoint:
	@test -n "$(call testenv_var,ENDPOINT)" || { echo "usage: make test-endpoint ENDPOINT=http://host:port [REGION=r] [PATH_STYLE=false] [INSECURE=true] [BUCKET=b ENDPOINT_PKGS=./store/storetest]" >&2; exit 2; }
	DURASHUFFLE_TEST_ENDPOINT='$(call testenv_var,ENDPOINT)' DURASHUFFLE_TEST_REGION='$(call testenv_var,REGION)' \
	DURASHUFFLE_TEST_BUCKET='$(call testenv_var,BUCKET)' DURASHUFFLE_TEST_PATH_STYLE='$(call testenv_var,PATH_STYLE)' \
	DURASHUFFLE_TEST_INSECURE='$(call testenv_var,INSECURE)' \
	  bash scripts/gotest.sh -count=1 -timeout 30m $(ENDPOINT_PKGS)

## fuzz: each fuzz target for FUZZTIME (default 30s) on hostile input: the
## manifest decoders (worker container, stage manifest, stage index), the
## big-endian IPC message reader of `write -i`, the
## frame and schema decoders, the range planner, and mutated Arrow IPC
## through DoPut (FuzzPut: a Flight server on the embedded S3 server) and
## through Writer.Write (FuzzWrite: a client on store.Mem), whose
## committed stages must read back the rows written.
## Their seed corpora (f.Add and testdata/fuzz) run in `make test`.
FUZZTIME ?= 30s
FUZZ_TARGETS := ./manifest:FuzzDecodeWorker ./manifest:FuzzDecodeStage ./manifest:FuzzDecodeIndex \
	./internal/frame:FuzzDecode ./internal/frame:FuzzDecodeSchema ./internal/arrowcheck:FuzzNativeMessages ./internal/frame:FuzzConcat ./reader:FuzzPlan \
	./sidecar:FuzzPut ./internal/testkit/e2e:FuzzWrite
.PHONY: fuzz
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
	  echo "== $${t#*:} ($${t%%:*}) for $(FUZZTIME)"; \
	  $(GO) test -run '^$$' -fuzz "^$${t#*:}$$" -fuzztime $(FUZZTIME) $${t%%:*}; \
	done

## minio: install the pinned MinIO server the tests start on loopback.
minio:
	@bash localstack/minio.sh install >/dev/null

## versitygw: install the pinned versitygw gateway the tests start on loopback.
versitygw:
	@bash localstack/versitygw.sh install >/dev/null

## azurite: install the pinned Azurite (npm) the Azure store's tests start on loopback.
azurite:
	@bash localstack/azurite.sh install >/dev/null

## fakegcs: install the pinned fake-gcs-server (a Google Cloud Storage
## emulator) the GCS store's tests start on loopback.
fakegcs:
	@bash localstack/fake-gcs-server.sh install >/dev/null

## localkms: install the pinned local-kms (an AWS KMS emulator) the
## encryption tests start on loopback.
localkms:
	@bash localstack/local-kms.sh install >/dev/null

vet:
	$(GO) vet $(PKGS)
	$(GO) vet -tags bench ./cmd/durashuffle/...
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

## docs: regenerate docs/configuration.md from the Config struct (the
## command line's config_docs_test.go renders it), and the README's table
## of which command takes which keys' flags from cmd/durashuffle/flags.go.
docs:
	DURASHUFFLE_UPDATE_DOCS=1 $(GO) test -count=1 -run '^(TestConfigurationDocInSync|TestReadmeFlagTable)$$' ./cmd/durashuffle

## build: bin/durashuffle, every command, bench included.
build:
	$(GO) build -tags bench -o bin/durashuffle ./cmd/durashuffle

clean:
	rm -rf bin

## bench: `durashuffle bench all` over the shaped link (several minutes, not part of test):
## rewrites BENCHMARKS.md's generated tables and the charts and JSON in docs/bench/.
.PHONY: bench
bench: build
	./bin/durashuffle bench all --memory-limit auto,off --out docs/bench --markdown BENCHMARKS.md
