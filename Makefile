# baton: the two commands in the README, and the longer ones behind them.
GO      ?= go
PKGS    ?= ./...

.PHONY: demo test deps check lint bench fuzz

## demo: replay the guide's frozen-holder night on an embedded etcd and an SQLite file.
demo:
	$(GO) run ./cmd/baton demo

## test: install the servers' packages, then run every test against real servers, with -race.
test: deps
	BATON_REQUIRE_SERVICES=1 $(GO) test -race -timeout 20m $(PKGS)

## deps: install the Debian packages the tests need (idempotent).
deps:
	./scripts/install-deps.sh

## lint: gofmt, go vet and staticcheck.
lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet $(PKGS)
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 $(PKGS)

## bench: benchmarks against the peers, five runs each (see README for the figures).
bench: deps
	BATON_REQUIRE_SERVICES=1 $(GO) test -run '^$$' -bench . -count 5 $(PKGS)

## fuzz: a short fuzzing pass over every URL parser.
FUZZ_PKGS = . ./etcd/ ./zk/ ./postgres/ ./redis/ ./redlock/
fuzz:
	for p in $(FUZZ_PKGS); do $(GO) test -run '^$$' -fuzz FuzzParseURL -fuzztime 30s $$p || exit 1; done
