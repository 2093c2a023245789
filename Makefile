# shardkit — one command per job. `make test` is what CI runs.
GO       ?= go
PKGS     := ./...
RACE_PKGS := ./idgen/... ./router/... ./catalog/... ./plugin/... ./migrations/... ./rebalance/... ./relay/...

.PHONY: test test-versions test-short vet lint bench fuzz demo demo-pooled demo-switchover reliability scale scale-direct generate postgres figures

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
# The whole suite runs on the packaged server (Debian 12's 15: the oldest
# supported version, and the one a fresh machine has without a build); after it,
# the core of each version in SHARDKIT_PG_VERSIONS runs on that version (test-versions).
test: postgres vet lint
	@out=$$(mktemp -d); plain=0; versions=0; \
	( $(GO) test -count=1 -race -short -timeout $(TEST_TIMEOUT) $(RACE_PKGS) > $$out/race 2>&1; echo $$? > $$out/rc ) & \
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) $(PKGS) || plain=$$?; \
	$(MAKE) --no-print-directory test-versions || versions=$$?; \
	wait; race=$$(cat $$out/rc); \
	echo "--- race stage (go test -race -short, run beside the first):"; cat $$out/race; rm -rf $$out; \
	echo "make test: tests $$( [ $$plain = 0 ] && echo passed || echo FAILED ), other versions $$( [ $$versions = 0 ] && echo passed || echo FAILED ), race tests $$( [ $$race = 0 ] && echo passed || echo FAILED )"; \
	[ $$plain = 0 ] && [ $$versions = 0 ] && [ $$race = 0 ]

## test-versions: the core of the suite on each other server version (SHARDKIT_PG_VERSIONS,
## default 17 18, built by `make postgres`): the plugin's differential direct and pooled, an
## online move with verify and rollback, migrations under load, backup and restore, the
## resolver, the catalog's queries. SHARDKIT_PG_VERSIONS=none skips it.
SHARDKIT_PG_VERSIONS ?= 17 18
CORE_RUN := ^(TestDifferential|TestDifferentialPooled|TestDifferentialPreparedPooler|TestDifferentialTypes|TestDifferentialTypesPooled|TestDifferentialTypesICU|TestPageScanOnly|TestTypedReadsICUDefault|TestOldHomeRefusesTheAppRole|TestReadsLinearizableAcrossMoves|TestReadsAcrossShardsAfterAMove|TestMoveKeepsPasswordsOutOfLogs|TestFailoverSyncStandby|TestFailoverOldPrimaryFenced|TestAppRoleOnTheCatalog|TestTLSAsWritten|Example.*|TestRollbackAfterCutover|TestDropPublicationUnderWrites|TestMoveDrainsBehindASynchronousStandby|TestPreflightRefusesAServerWhoseSyncStandbyIsDown|TestMoveKeepsFailoverSlotAcrossSourceFailover|TestFailoverLinearizable|TestSwitchoverLinearizable|TestMoveAcrossTargetFailover|TestMoveReversibleAcrossTargetFailover|TestMoveRollsBackAcrossTargetFailoverWithSyncedSlot|TestOnlineMoveWithPluginWriters|TestTargetRefusesWritesUntilTheFlip|TestMoveUsesAdminDSN|TestAddColumnUnderLoad|TestMigrateAddsVersionAndResumes|TestDump.*|TestRestore.*|TestResolver.*|TestLoad|TestWatch.*|TestSlotLeases|TestRenewAndRelease|TestSetServerDSN)$$
CORE_PKGS := ./plugin ./rebalance ./migrations ./backup ./resolver ./catalog ./internal/pgdsn
test-versions:
	@[ "$(SHARDKIT_PG_VERSIONS)" = none ] && exit 0; rc=0; \
	for v in $(SHARDKIT_PG_VERSIONS); do \
	  bin=$$($(GO) run ./internal/harness/pglocal/cmd/pgbin $$v) || { rc=1; continue; }; \
	  echo "--- PostgreSQL $$v ($$bin): the core"; \
	  SHARDKIT_PG_BIN=$$bin $(GO) test -count=1 -timeout $(TEST_TIMEOUT) -run '$(CORE_RUN)' $(CORE_PKGS) || rc=1; \
	done; exit $$rc

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

## fuzz: a short fuzzing run of every fuzz target in the module, found by name (a new
## target is run without being listed here); FUZZTIME per target, 20s by default.
## FuzzDifferential starts clusters and runs its cases on one worker, for a minute.
FUZZTIME ?= 20s
fuzz:
	@grep -rl --include='*_test.go' '^func Fuzz' . | sort | while read -r f; do \
	  dir=$$(dirname "$$f"); \
	  for t in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$$f"); do \
	    case $$t in \
	    FuzzDifferential) flags="-fuzztime 60s -fuzzminimizetime 0 -parallel 1" ;; \
	    *) flags="-fuzztime $(FUZZTIME)" ;; \
	    esac; \
	    echo "--- $$t ($$dir)"; \
	    $(GO) test -run '^$$' -fuzz "^$$t$$" $$flags "$$dir" || exit 1; \
	  done; \
	done

## test-short: the quick loop (a few minutes): the pure packages whole, and one
## representative test per subsystem on real clusters; `make test` is what CI runs.
SHORT_PURE := ./idgen/... ./router/... ./internal/sqlcond ./internal/pgorder ./internal/pgdsn \
	./internal/twophase ./internal/memrows ./internal/rowsum ./internal/bytesize ./internal/sqlversions
test-short: postgres
	$(GO) test -count=1 -short $(SHORT_PURE)
	$(GO) test -count=1 -run '^(Example.*|TestSlotLeases|TestDumpDropRestore|TestResolverFollowsTheCoordinator|TestDifferential|TestRollbackAfterCutover|TestMigrateAddsVersionAndResumes|TestUnixPeerOfAnotherUIDRefused|TestRouterFollowsCatalogThroughRelay)$$' \
	  ./plugin ./catalog ./rebalance ./migrations ./backup ./resolver ./relay

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

## demo-switchover: the same load with a planned switchover of a server's primary instead of moves
demo-switchover: postgres
	$(GO) run ./examples/photos/cmd/demo -switchover

generate:
	$(GO) generate ./...

## postgres: make sure PostgreSQL server binaries are installed
postgres:
	@./internal/harness/pglocal/ensure-postgres.sh
