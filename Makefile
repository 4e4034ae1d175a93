# idemlake — the two commands that matter on a fresh machine: `make demo` and `make test`.
# Everything they need (Rust crates, Python readers, the S3 test server) is installed by
# the project's own scripts. CARGO_TARGET_DIR may point outside the clone (CI does).

CARGO       ?= cargo
# debug (cargo's dev profile), release, profiling (release + line tables, for perf) or dist
# (release + fat LTO, one codegen unit; `WHEEL_PROFILE=dist make wheel`); see Cargo.toml and
# bench/BUILD.md.
PROFILE     ?= debug
CARGO_FLAGS := $(if $(filter debug,$(PROFILE)),,--profile $(PROFILE))
TARGET_DIR  := $(or $(CARGO_TARGET_DIR),target)
BIN         := $(TARGET_DIR)/$(PROFILE)/idemlake
# The profile of `make bench` and the bench-* targets: release unless PROFILE names another
# optimised one (`PROFILE=dist make bench` measures what ships).
BENCH_PROFILE := $(if $(filter dist profiling,$(PROFILE)),$(PROFILE),release)
BENCH_BIN   := $(TARGET_DIR)/$(BENCH_PROFILE)/idemlake
# `make wheel`'s profile (release: see docs/src/getting-started/install.md).
WHEEL_PROFILE ?= release
SCALE       ?= 0.01
DEMO_DAYS   := 1995-06-01 1995-06-02 1995-06-03 1995-06-04 1995-06-05 1995-06-06 1995-06-07

.PHONY: build wheel demo test test-ballista test-orchestrators torture lint fmt py-env s3-start s3-stop pg-start pg-stop clean-demo bench bench-scale bench-ballista bench-landing bench-landing-s3 bench-checks bench-postgres

build:
	$(CARGO) build $(CARGO_FLAGS) --bin idemlake

py-env:
	scripts/py-env >/dev/null

## wheel: the Python wheel of the binary (maturin, pinned, installed on first use outside the
## clone) into $(TARGET_DIR)/wheels; `pip install` it and `idemlake` is on the venv's PATH.
## Reuses a warm build of WHEEL_PROFILE (release; `WHEEL_PROFILE=dist make wheel` for what ships).
wheel:
	scripts/wheel --profile $(WHEEL_PROFILE) --out $(TARGET_DIR)/wheels

## demo: generate TPC-H data (SF $(SCALE)), publish a week of windows for every sample task,
## re-run one window, and show what was published.
demo: build
	$(BIN) gen-tpch --scale $(SCALE) --out data
	$(BIN) validate
	@for day in $(DEMO_DAYS); do \
	  for task in lineitem_by_ship_day daily_revenue orders_by_day; do \
	    $(BIN) run $$task --window $$day || exit $$?; \
	  done; \
	done
	@echo "--- re-running 1995-06-03: same rows, one more commit, no duplicates"
	$(BIN) run lineitem_by_ship_day --window 1995-06-03
	$(BIN) run orders_by_day --window 1995-06-03
	@echo "--- what was published"
	$(BIN) status lineitem_by_ship_day --from 1995-06-01 --to 1995-06-08
	$(BIN) status daily_revenue --from 1995-06-01 --to 1995-06-07
	$(BIN) status orders_by_day --from 1995-06-01 --to 1995-06-07

## demo-s3: the same week against the local S3 server (scripts/s3-server, started if it is not
## running; `make s3-stop` stops it), lake s3://idemlake/demo.
demo-s3: build s3-start
	$(BIN) gen-tpch --scale $(SCALE) --out data
	@eval "$$(scripts/s3-server env)"; \
	for day in $(DEMO_DAYS); do \
	  for task in lineitem_by_ship_day daily_revenue orders_by_day; do \
	    $(BIN) --lake s3://idemlake/demo run $$task --window $$day || exit $$?; \
	  done; \
	done; \
	echo "--- re-running 1995-06-03: same rows, one more commit, no duplicates"; \
	$(BIN) --lake s3://idemlake/demo run lineitem_by_ship_day --window 1995-06-03 && \
	$(BIN) --lake s3://idemlake/demo status lineitem_by_ship_day --from 1995-06-01 --to 1995-06-07

MDBOOK_VERSION := 0.4.52
TOOLS_DIR   ?= $(or $(CARGO_TARGET_DIR),$(HOME)/.cache/idemlake)/tools
MDBOOK      := $(TOOLS_DIR)/bin/mdbook
.PHONY: demo-s3 docs

## docs: the user guide (docs/, mdBook) into docs/book/. Installs mdbook $(MDBOOK_VERSION) into
## $(TOOLS_DIR) the first time (cargo install, a few minutes), outside the clone.
docs:
	@test -x $(MDBOOK) || $(CARGO) install mdbook --locked --version $(MDBOOK_VERSION) \
	  --no-default-features --features search --root $(TOOLS_DIR)
	$(MDBOOK) build docs

## test: unit + integration tests, with the test-only fault injection (`--features faults`).
## Installs the Python Delta readers and starts the local S3 server (SeaweedFS, loopback only)
## that the S3 tests run against; `make s3-stop` stops it. First builds the wheel of this very
## build (scripts/wheel, which installs maturin on first use) for tests/it/wheel.rs: built
## here, before the tests run, because cargo re-links target/<profile>/idemlake, the binary the
## other tests are running, even when the build is fresh.
WHEEL_TEST_PROFILE := $(if $(filter debug,$(PROFILE)),dev,$(PROFILE))
test: py-env s3-start pg-start
	wheel=$$(scripts/wheel --profile $(WHEEL_TEST_PROFILE) --features faults --out $(TARGET_DIR)/wheels-test) && \
	IDEMLAKE_TEST_WHEEL=$$wheel $(CARGO) test $(CARGO_FLAGS) --features faults --all-targets

## torture: the differential torture suite at full length: TORTURE_CASES generated tasks
## (default 2,000), each run in six ways (accelerated backfills, the plain twin, single runs,
## kill -9 then --missing, two racing processes) and compared with a plain-DataFusion oracle.
## `make test` runs a 5-minute seeded slice of it. TORTURE_SEED picks the first seed.
TORTURE_CASES ?= 2000
TORTURE_SEED  ?= 14000
TORTURE_JOBS  ?= 2
torture: py-env
	IDEMLAKE_TORTURE_CASES=$(TORTURE_CASES) IDEMLAKE_TORTURE_SEED=$(TORTURE_SEED) \
	IDEMLAKE_TORTURE_JOBS=$(TORTURE_JOBS) \
	  $(CARGO) test $(CARGO_FLAGS) --features faults --test it torture::generated -- --nocapture

## test-ballista: the Ballista engine end to end, with a build that has it (--features ballista):
## `idemlake cluster scheduler` and two executors on loopback, windows of three sample tasks
## (one reading a Delta table) run through the cluster and locally, both tables compared with each
## other and with polars over the source; then Parquet, CSV and Delta sources on the local S3
## server. .ci/run runs it after `make test`.
test-ballista: py-env s3-start
	$(CARGO) build $(CARGO_FLAGS) --features ballista --bin idemlake
	IDEMLAKE_BIN=$(BIN) PYTHON=.venv-py/bin/python scripts/test-ballista

## test-orchestrators: real Airflow (`airflow dags test`) and Dagster (`dagster asset materialize`)
## runs of examples/ against a temporary sample project (venvs .venv-airflow, .venv-dagster),
## idemlake `pip install`ed into both from a wheel of this build (PROFILE, with `faults`).
test-orchestrators: py-env
	WHEEL_PROFILE=$(WHEEL_TEST_PROFILE) scripts/test-orchestrators

## bench: idemlake vs polars/deltalake/DataFusion peers on TPC-H lineitem (SF 1 by default),
## with the release binary (`PROFILE=dist make bench`: the dist one); writes bench/RESULTS.md, then
## measures what the default independent check costs (bench-checks, appended to bench/CHECKS.md). Not part of `make test`. Knobs
## (BENCH_SCALE, BENCH_REPS, BENCH_WORK, ...) are listed in scripts/bench.py. ~15 min at SF 1 with
## BENCH_LOAD_REPS=3, most of it the DataFusion COPY peers and the peer's 365-process loop.
bench: py-env
	$(CARGO) build --profile $(BENCH_PROFILE) --bin idemlake
	BENCH_BIN=$(BENCH_BIN) BENCH_PROFILE=$(BENCH_PROFILE) python3 scripts/bench.py
	BENCH_BIN=$(BENCH_BIN) python3 scripts/bench_checks.py

## bench-scale: 1, 2, 4, 8 worker processes (`backfill --shard I/N`) publishing one range into
## one table on the loopback SeaweedFS; windows/s, commits/s, rebuilt commits, window p50/p99,
## every window checked against the source with polars. Writes bench/SCALE.md. Not in `make test`.
bench-scale:
	$(CARGO) build --profile $(BENCH_PROFILE) --bin idemlake
	BENCH_BIN=$(BENCH_BIN) python3 scripts/bench_scale.py

## bench-ballista: one day and one month window of the lineitem task on a local Ballista cluster
## (scheduler + two executors, loopback) vs the embedded engine, with the time split; writes
## bench/BALLISTA.md. Release build with --features ballista. Not in `make test`.
bench-ballista:
	$(CARGO) build --profile $(BENCH_PROFILE) --features ballista --bin idemlake
	BENCH_BIN=$(BENCH_BIN) python3 scripts/bench_ballista.py

## bench-landing: a landing zone (LANDING_DAYS days x LANDING_FILES small files a day, Hive
## `dt=` directories) read by a day task: the nightly first run of a day window (three task
## forms), initial load, re-runs of one day window and a 30-day backfill,
## idemlake vs polars and DuckDB, every table checked against polars; appends to bench/LANDING.md.
## bench-landing-s3: the same on the local S3 server (source and tables), with the object-store
## requests of one day window; LANDING_S3_LATENCY_MS=20 puts the latency proxy in front.
## Knobs in scripts/bench_landing.py. Not in `make test`.
## bench-checks: what the default independent check costs: the 6-column task with the default
## check (rows), with `default = "content"`, and opted out, alternating: initial load, a day
## window, a 365-day backfill (TPC-H SF 1). Appends to bench/CHECKS.md. Not in `make test`.
bench-checks:
	$(CARGO) build --profile $(BENCH_PROFILE) --bin idemlake
	BENCH_BIN=$(BENCH_BIN) python3 scripts/bench_checks.py

## bench-postgres: a PostgreSQL `orders` table (PG_ROWS rows, default 10 million, over 365 days)
## read by a day task: a nightly day window and a 365-day backfill, first runs, vs polars
## `read_database_uri` + `write_deltalake`, with peak RSS; appends to bench/POSTGRES.md.
bench-postgres: py-env pg-start
	$(CARGO) build --profile $(BENCH_PROFILE) --bin idemlake
	BENCH_BIN=$(BENCH_BIN) .venv-py/bin/python scripts/bench_postgres.py

bench-landing: py-env
	$(CARGO) build --profile $(BENCH_PROFILE) --bin idemlake
	BENCH_BIN=$(BENCH_BIN) .venv-py/bin/python scripts/bench_landing.py

bench-landing-s3: py-env s3-start
	$(CARGO) build --profile $(BENCH_PROFILE) --bin idemlake
	LANDING_S3=1 BENCH_BIN=$(BENCH_BIN) .venv-py/bin/python scripts/bench_landing.py

s3-start:
	scripts/s3-server start

s3-stop:
	scripts/s3-server stop

## pg-start / pg-stop: the loopback PostgreSQL server the PostgreSQL-source tests read
## (scripts/pg-server: Debian's packages, installed with apt-get when absent).
pg-start:
	scripts/pg-server start

pg-stop:
	scripts/pg-server stop

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets --features faults -- -D warnings
	$(CARGO) clippy --lib --bins -- -D warnings
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --no-deps --document-private-items

fmt:
	$(CARGO) fmt --all

clean-demo:
	rm -rf lake
