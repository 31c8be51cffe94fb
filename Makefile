# baton: the two commands in the README, and the longer ones behind them.
GO      ?= go
# The slowest test packages first (go test starts them in this order, and
# drops the repeats from ./...): on 2 cores, the longest one (zk, about 5
# minutes) then runs beside the others instead of alone at the end.
PKGS    ?= ./zk/ ./cmd/baton/ ./etcd/ ./postgres/ ./redis/ ./redlock/ ./...

.PHONY: demo test deps lint bench fuzz faults

## demo: replay the guide's frozen-holder night on an embedded etcd and an SQLite file.
demo:
	$(GO) run ./cmd/baton demo

## test: install the servers' packages, then run every test against real servers, with -race
## (and vet the bench module, so that its benchmarks keep compiling).
test: deps
	BATON_REQUIRE_SERVICES=1 $(GO) test -race -timeout 20m $(PKGS)
	cd bench && $(GO) vet ./...

## deps: install the Debian packages the tests need (idempotent).
deps:
	./scripts/install-deps.sh

## lint: gofmt, go vet and staticcheck.
lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet $(PKGS)
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 $(PKGS)
	cd bench && $(GO) vet ./... && $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

## bench: the command of every row of the README's "Measured" table, with its
## run count: the backends' packages, ZooKeeper's alternating rounds, then the
## bench module's (Redis, Redlock, PostgreSQL against ZooKeeper's recipe), and
## the bare Redis lock that the redis package doc measures the lease against
## (RedisFloor).
bench: deps
	BATON_REQUIRE_SERVICES=1 $(GO) test -run '^$$' -bench . -count 5 ./etcd/ ./postgres/ ./fence/postgres/
	BATON_REQUIRE_SERVICES=1 $(GO) test -run '^$$' -bench Paired/clients=1 -benchtime 60x -count 10 ./zk/
	BATON_REQUIRE_SERVICES=1 $(GO) test -run '^$$' -bench Paired/clients=8 -benchtime 10x -count 10 ./zk/
	cd bench && BATON_REQUIRE_SERVICES=1 $(GO) test -run '^$$' -bench 'RedisCycle|RedisContended$$' -benchtime 3000x -count 5 .
	cd bench && BATON_REQUIRE_SERVICES=1 $(GO) test -run '^$$' -bench 'RedisPaired$$' -benchtime 400x -count 10 .
	cd bench && BATON_REQUIRE_SERVICES=1 $(GO) test -run '^$$' -bench RedisPairedLatency -benchtime 64x -count 4 .
	cd bench && BATON_REQUIRE_SERVICES=1 $(GO) test -run '^$$' -bench RedisFloor -benchtime 400x -count 6 .
	cd bench && BATON_REQUIRE_SERVICES=1 $(GO) test -run '^$$' -bench 'RedlockContended$$' -benchtime 1000x -count 3 .
	cd bench && BATON_REQUIRE_SERVICES=1 $(GO) test -run '^$$' -bench 'ContendedLatency' -benchtime 1000x -count 3 .
	cd bench && BATON_REQUIRE_SERVICES=1 $(GO) test -run '^$$' -bench RedlockPaired -benchtime 100x -count 10 .
	cd bench && BATON_REQUIRE_SERVICES=1 $(GO) test -run '^$$' -bench PostgresVsZooKeeper -benchtime 40x -count 5 .

## fuzz: a short fuzzing pass over every URL parser (the fence store's sqlite: URLs too), over Redact, and over the fence stores' table-name check.
FUZZ_PKGS = . ./etcd/ ./zk/ ./postgres/ ./redis/ ./redlock/
fuzz:
	for p in $(FUZZ_PKGS); do $(GO) test -run '^$$' -fuzz FuzzParseURL -fuzztime 30s $$p || exit 1; done
	$(GO) test -run '^$$' -fuzz FuzzRedact -fuzztime 30s .
	$(GO) test -run '^$$' -fuzz FuzzSQLiteURL -fuzztime 30s ./fence/
	$(GO) test -run '^$$' -fuzz FuzzValidateTable -fuzztime 30s ./fence/internal/fencesql/

## faults: the long fault matrices, kept out of make test: a ZooKeeper follower
## cut off from its leader at session timeouts of 2, 3, 4 and 8 ticks (one to two minutes).
faults: deps
	BATON_FAULTS=1 BATON_REQUIRE_SERVICES=1 $(GO) test -race -timeout 20m -run 'Matrix' -v ./zk/
