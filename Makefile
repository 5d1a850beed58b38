# durashuffle: the README's commands.
GO ?= go
PKGS := ./...
# Packages whose concurrency is worth the race detector's time.
RACE_PKGS := ./chunker ./uploader ./reader ./internal/retry ./internal/frame

.PHONY: run test vet build minio docs clean

## run: the demo: write a stage on the embedded S3 server, read it back, verify.
run:
	$(GO) run ./cmd/durashuffle demo

## test: every test, MinIO-backed ones included (MinIO is built once, then cached).
test: minio vet
	bash scripts/gotest.sh -count=1 -timeout 20m $(PKGS)
	bash scripts/gotest.sh -count=1 -race -timeout 10m $(RACE_PKGS)

## minio: install the pinned MinIO server the tests start on loopback.
minio:
	@bash localstack/minio.sh install >/dev/null

vet:
	$(GO) vet $(PKGS)
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

## docs: regenerate docs/configuration.md from the Config struct.
docs:
	DURASHUFFLE_UPDATE_DOCS=1 $(GO) test -count=1 -run TestConfigurationDocInSync ./internal/config

build:
	$(GO) build -o bin/durashuffle ./cmd/durashuffle

clean:
	rm -rf bin
