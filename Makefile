# shardkit — one command per job. `make test` is what CI runs.
GO       ?= go
PKGS     := ./...
RACE_PKGS := ./idgen/... ./router/... ./catalog/... ./plugin/... ./migrations/... ./rebalance/... ./relay/...

.PHONY: test test-short vet lint bench fuzz demo demo-pooled reliability scale scale-direct generate postgres tools figures

## test: vet, staticcheck and every test on real, throwaway Postgres clusters (race detector on concurrent packages)
# Both stages always run: a failure in the first must not hide what -race finds.
# The race stage runs -short: it skips the tests whose concurrency is between OS
# processes (the movers and sign-ups killed with SIGKILL, the CLI) and the 2000-shard
# provisioning, which the first stage runs; every in-process concurrent test runs in both.
# The two stages run side by side: much of a test's time is spent waiting on Postgres
# (replication catching up, leases running out), which leaves the CPU to the other stage.
# The race stage's output is kept and printed after the first stage's.
# -timeout is a hang detector per package, not a budget: beside a busy loop on two
# cores `plugin` took 1102 s in the race stage and more than 1200 s in the plain one
# (2026-11-28), so the bound is half as much again.
TEST_TIMEOUT ?= 30m
test: postgres vet lint
	@out=$$(mktemp -d); plain=0; \
	( $(GO) test -count=1 -race -short -timeout $(TEST_TIMEOUT) $(RACE_PKGS) > $$out/race 2>&1; echo $$? > $$out/rc ) & \
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) $(PKGS) || plain=$$?; \
	wait; race=$$(cat $$out/rc); \
	echo "--- race stage (go test -race -short, run beside the first):"; cat $$out/race; rm -rf $$out; \
	echo "make test: tests $$( [ $$plain = 0 ] && echo passed || echo FAILED ), race tests $$( [ $$race = 0 ] && echo passed || echo FAILED )"; \
	[ $$plain = 0 ] && [ $$race = 0 ]

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) vet $(PKGS)

lint:
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 $(PKGS)

## bench: Go benchmarks, ratios against plain GORM on the same database
bench: postgres
	$(GO) test -run '^$$' -bench . -benchmem -count 1 -timeout 20m $(PKGS)

## figures: run the benchmarks, figure tests and demo runs behind docs/performance.md's
## maintained tables, keep their output in docs/figures/, and rewrite those tables (an hour
## or more: run it on a quiet machine; `go run ./internal/harness/docscheck/figures -run -only NAME`
## takes one figure)
figures:
	$(GO) run ./internal/harness/docscheck/figures -run

## fuzz: a short fuzzing run of every fuzz target
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzComposeDecode -fuzztime 20s ./idgen
	$(GO) test -run '^$$' -fuzz FuzzParseSchemaName -fuzztime 20s ./router
	$(GO) test -run '^$$' -fuzz FuzzParseID -fuzztime 20s ./cmd/shardctl
	$(GO) test -run '^$$' -fuzz FuzzConditionReader -fuzztime 20s ./plugin
	$(GO) test -run '^$$' -fuzz FuzzLex -fuzztime 20s ./internal/sqlcond
	$(GO) test -run '^$$' -fuzz FuzzCompareNumeric -fuzztime 20s ./internal/pgorder
	$(GO) test -run '^$$' -fuzz FuzzDifferential -fuzztime 60s -fuzzminimizetime 0 -parallel 1 ./plugin
	$(GO) test -run '^$$' -fuzz FuzzFlagValues -fuzztime 20s ./cmd/shardctl
	$(GO) test -run '^$$' -fuzz FuzzDecode -fuzztime 20s ./examples/photos/api
	$(GO) test -run '^$$' -fuzz FuzzLibpq -fuzztime 20s ./internal/pgdsn
	$(GO) test -run '^$$' -fuzz FuzzDecodeMap -fuzztime 20s ./relay

## reliability: the long runs — 8 processes × 1M IDs on one shard with clock steps and kills,
## 90 s of linearizable reads and writes across moves checked with porcupine, then a 10-minute soak of the photo service with shards moved in the middle
reliability: postgres
	SHARDKIT_RELIABILITY=1 $(GO) test -count=1 -run TestReliabilityIDs -v -timeout 30m ./catalog
	SHARDKIT_RELIABILITY=1 $(GO) test -count=1 -run TestReadsLinearizableAcrossMoves -v -timeout 20m ./rebalance
	$(GO) run ./examples/photos/cmd/demo -warmup 5m -cooldown 5m -soak

## scale: the scale harness — app processes (OS processes) with routers, the plugin and IDs,
## servers behind PgBouncers, a shard move under load; one table per size (see docs/scale.md).
## By default the routers wait on 10 relays (one per host) and every process leases a 10-bit
## ID lease (1008 processes); SCALE_FLAGS replaces the flags, e.g. make scale SCALE_FLAGS='-procs 300 -routers 4'
## for routers that poll the catalog.
SCALE_FLAGS ?= -procs 20,100,300 -routers 4 -relays 10 -lease-bits 10
scale: postgres
	$(GO) run ./internal/harness/scale/cmd/scale $(SCALE_FLAGS)

## scale-direct: the deployment the quickstart starts with: every app process connects straight
## to the servers and the catalog (no pooler, no relay), one router each polling the catalog,
## 10-bit ID leases; 20, 100 and 200 processes let go at once (see docs/scale.md#direct-connections).
## SCALE_DIRECT_FLAGS replaces the flags.
SCALE_DIRECT_FLAGS ?= -procs 20,100,200 -routers 1 -direct -lease-bits 10 -together
scale-direct: postgres
	$(GO) run ./internal/harness/scale/cmd/scale $(SCALE_DIRECT_FLAGS)

## demo: local clusters, the photo service, load, and a live shard move
demo: postgres
	$(GO) run ./examples/photos/cmd/demo

## demo-pooled: the same with a PgBouncer in transaction mode in front of each server
demo-pooled: postgres
	$(GO) run ./examples/photos/cmd/demo -pooled

generate:
	$(GO) generate ./...

## postgres: make sure PostgreSQL server binaries are installed
postgres:
	@./internal/harness/pglocal/ensure-postgres.sh
