# multinode — the two commands a newcomer needs are `make demo` and `make test`.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The pinned kubectl and helm come first on PATH for everything make runs.
BIN_PATH = $(shell $(PY) -m localcluster bin-path 2>/dev/null)
PYTEST_ARGS ?=

.PHONY: help venv dist binaries images peers cluster-up cluster-down push release crds docs lint test test-unit demo bench bench-smoke clean

help:
	@echo "make demo         local cluster + operator + examples/real: 2 real nodes train, a rank is killed, resume (MULTINODE_DEMO=kwok: examples/job.yaml on kwok)"
	@echo "make test         lint, unit and integration tests on the local cluster (what CI runs)"
	@echo "make test-unit    only the tests that need no cluster (tests/unit, tests/frameworks)"
	@echo "make lint         ruff, mypy, the import contracts and actionlint (make test runs it first)"
	@echo "make cluster-up   start the local control plane and its registry (prints export KUBECONFIG=... MULTINODE_REGISTRY=...); REAL_NODES=2 adds real nodes, TIMINGS=stock stock node timings"
	@echo "make cluster-down stop it"
	@echo "make push         push the operator and trainer images and the chart to \$$MULTINODE_REGISTRY (the local cluster's)"
	@echo "make release      REGISTRY=host [CHART_REPOSITORY=host/path]: wheel, sdist, operator image, chart and SBOM, pushed as a release is"
	@echo "make crds         regenerate crds/ from the pydantic models"
	@echo "make docs         regenerate docs/reference.md from the pydantic models"
	@echo "make dist         the wheel and sdist of multinode-operator into dist/, checked by twine"
	@echo "make bench        benchmarks (not part of make test), after make bench-smoke (a toy-sized run of each)"

$(STAMP): pyproject.toml tools/localcluster/pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check --upgrade pip
	@# The distribution was named `multinode` before it became `multinode-operator`: a venv made then still has
	@# it (removing it after the install would take the `multinode` command with it), and its egg-info in
	@# operator/ would still list it.
	$(VENV)/bin/pip uninstall -q -y --disable-pip-version-check multinode
	rm -rf operator/multinode.egg-info
	$(VENV)/bin/pip install -q --disable-pip-version-check -e '.[test]' -e tools/localcluster
	touch $@

venv: $(STAMP)

# The wheel and sdist PyPI gets (`pip install multinode-operator`). build makes the sdist first and the wheel
# from the sdist, so a file the sdist misses fails here. --no-isolation: the venv's setuptools (the test
# extra) builds, so there is no build env to download and the unit test that runs this target
# (tests/unit/packaging) stays offline; build still checks it meets [build-system] requires.
DIST ?= dist
dist: venv
	rm -rf $(DIST)
	$(PY) -m build --no-isolation --outdir $(DIST) .
	$(VENV)/bin/twine check --strict $(DIST)/*

# Everything is built once per version and cached (.cache/localcluster); `localcluster prepare` runs the
# slow builds side by side (Go compiling while pip and debootstrap download), which a cold start needs.
binaries: venv
	@$(PY) -m localcluster prepare

# The real nodes' images (operator, trainer, pause), built without Docker and cached by content, and torch
# for the real trainers (installed once, mounted into pods): made here, not inside a timed test, so the
# first real-node cluster of a test session starts in seconds. `make test` also installs HF and DeepSpeed
# for the real-framework checkpoint tests (--frameworks).
images: venv
	@$(PY) -m localcluster prepare --images

# The benchmark peers, JobSet and Kubeflow Training Operator v1 (cached like the rest; the smoke run of the
# benchmarks in `make test` runs them).
peers: venv
	@$(PY) -m localcluster prepare --peers

# REAL_NODES=N adds N real kubelet + containerd nodes beside the kwok nodes (root only).
REAL_NODES ?= 0
# TIMINGS=stock runs the control plane with stock node timings (40 s grace, 300 s tolerations), as users' clusters do.
TIMINGS ?= short
cluster-up: venv
	@$(PY) -m localcluster prepare $(if $(filter-out 0,$(REAL_NODES)),--images)
	@$(PY) -m localcluster up --real-nodes $(REAL_NODES) --timings $(TIMINGS)

cluster-down: venv
	@$(PY) -m localcluster down

# The images and the chart as an admin pushes them, into the registry `make cluster-up` printed:
# $MULTINODE_REGISTRY/multinode/{operator,trainer}:<version> and oci://$MULTINODE_REGISTRY/charts/multinode-operator.
push: venv
	@[ -n "$${MULTINODE_REGISTRY:-}" ] || { echo "make push: MULTINODE_REGISTRY is not set (make cluster-up prints it)"; exit 2; }
	@$(PY) -m localcluster push --registry "$$MULTINODE_REGISTRY"

# A release, as .github/workflows/release.yml runs it: the wheel and sdist (make dist, into $(DIST)), the
# operator image pushed as $(REGISTRY)/multinode/operator:<version> (gzip layers), the chart packaged into
# $(RELEASE_DIR) and pushed to oci://$(CHART_REPOSITORY)/multinode-operator, and the image's SBOM beside it.
# Log in first (crane auth login, or docker login: crane and helm both read ~/.docker/config.json).
# RELEASE_TAG (the workflow's git tag), when set, must be v<version>: checked before anything is built.
REGISTRY ?=
CHART_REPOSITORY ?= $(REGISTRY)/charts
RELEASE_DIR ?= release
RELEASE_TAG ?=
release: venv
	@[ -n "$(REGISTRY)" ] || { echo "make release: set REGISTRY (e.g. make release REGISTRY=ghcr.io)"; exit 2; }
	@$(if $(RELEASE_TAG),$(PY) -m localcluster release --check-tag "$(RELEASE_TAG)")
	@$(MAKE) --no-print-directory dist
	@$(PY) -m localcluster release --registry "$(REGISTRY)" --chart-repository "$(CHART_REPOSITORY)" \
	  --out "$(RELEASE_DIR)"

# The chart installs the same generated CRD (charts/multinode-operator/files/crd.yaml); a test compares both.
crds: venv
	$(PY) -m multinode.api.crd > crds/trainingjobs.multinode.dev.yaml
	cp crds/trainingjobs.multinode.dev.yaml charts/multinode-operator/files/crd.yaml

# The field reference is generated from the same models as the CRD.
docs: venv
	$(PY) -m multinode.api.reference > docs/reference.md

# ruff (rules in [tool.ruff]) over operator/, tools/ and tests/; mypy (strict on api, render, reconcile and
# checkpoints, [tool.mypy]) over operator/multinode only: tools/ and tests/ are not type-checked; the
# import contracts; actionlint over .github/workflows (built from the Go module proxy on first use). Each runs even when an earlier one failed, so one run shows every finding; any failure
# fails the target. `make test` (so CI) runs it first.
lint: venv
	@rc=0; \
	echo "ruff check"; $(VENV)/bin/ruff check operator tools tests || rc=1; \
	echo "mypy"; $(VENV)/bin/mypy || rc=1; \
	echo "lint-imports"; $(VENV)/bin/lint-imports || rc=1; \
	echo "actionlint"; $(PY) -m localcluster actionlint || rc=1; \
	exit $$rc

# Two pytest workers (pytest-xdist) on the machine's two cores. One order for the whole run: SEED is handed to
# pytest-randomly in both tiers, so `make test SEED=N` repeats a run's order (the first line prints it).
# `:=`, not `?=`: a recursive variable runs the shell again, drawing a new seed, at each use.
ifndef SEED
SEED := $(shell python3 -c 'import random; print(random.randrange(2**32))')
endif
WORKERS ?= 2
RANDOM_ORDER = -p randomly --randomly-seed=$(SEED)

test-unit: venv
	$(PY) -m pytest tests/unit tests/frameworks -n $(WORKERS) $(RANDOM_ORDER) $(PYTEST_ARGS)

# The tiers of tests/ (tests/conftest.py): unit and frameworks first, stopping at the first failure (minutes, no
# cluster), then integration. tests/bench is `make bench-smoke`'s.
# --dist loadscope with the scopes tests/conftest.py gives: each module's tests stay on one worker (its module
# fixtures start once), every real-node test on the same one (one real-node cluster per host), first (it is
# the longest group). pytest exits 5 when a selection collects no test; that is not a failure.
test: venv lint
	@echo "make test: seed $(SEED) (make test SEED=$(SEED) repeats this order)"
	@$(PY) -m localcluster prepare --images --frameworks --peers --release
	$(PY) -m pytest tests/unit tests/frameworks -x -n $(WORKERS) $(RANDOM_ORDER) $(PYTEST_ARGS) || { rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "pytest collected no unit tests"; exit 0; fi; exit $$rc; }
	PATH="$(BIN_PATH):$$PATH" $(PY) -m pytest tests/integration -n $(WORKERS) --dist loadscope \
	  --no-loadscope-reorder $(RANDOM_ORDER) $(PYTEST_ARGS) || { rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "pytest collected no integration tests"; exit 0; fi; exit $$rc; }

# -P: the script folder must not go on sys.path, where tools/localcluster would shadow the package.
# The demo prepares what it needs itself (real nodes: images and torch too), side by side.
demo: venv
	PATH="$(BIN_PATH):$$PATH" $(PY) -P tools/demo.py

# Benchmarks: not part of `make test`; `make bench-smoke` runs a toy-sized smoke of each, first. Each writes .cache/bench/<name>.json
# and prints a table; the peer benchmarks (startup, load, recovery_peers) run JobSet and Kubeflow Training
# Operator v1 beside the operator; tools/bench/report.py gathers the JSON into docs/benchmarks.json and the
# tables of docs/benchmarks.md.
# A toy-sized run of every benchmark, its JSON checked (tests/bench): `make bench` runs it first.
bench-smoke: venv peers
	PATH="$(BIN_PATH):$$PATH" $(PY) -m pytest tests/bench $(PYTEST_ARGS)

bench: venv peers bench-smoke
	$(PY) -P tools/bench/mirror.py
	$(PY) -P tools/bench/mirror_chaos.py --runs 300
	PATH="$(BIN_PATH):$$PATH" $(PY) -P tools/bench/recovery.py --nodes 8 64 --trials 10
	PATH="$(BIN_PATH):$$PATH" $(PY) -P tools/bench/startup.py --sizes 16 128 1000 --runs 5 --runs-at-1000-for-kubeflow 2
	PATH="$(BIN_PATH):$$PATH" $(PY) -P tools/bench/floor.py --nodes 1000 --runs 3
	PATH="$(BIN_PATH):$$PATH" $(PY) -P tools/bench/gang.py --nodes 1000 --runs 3
	PATH="$(BIN_PATH):$$PATH" $(PY) -P tools/bench/load.py --jobs 100 --nodes-per-job 8 --runs 2 --rss-job-nodes 16 --systems ours jobset
	PATH="$(BIN_PATH):$$PATH" $(PY) -P tools/bench/recovery_peers.py --nodes 8 64 --trials 5
	PATH="$(BIN_PATH):$$PATH" $(PY) -P tools/bench/node_loss.py --trials 5 --timings stock --after-timeout out-of-service
	PATH="$(BIN_PATH):$$PATH" $(PY) -P tools/bench/node_loss.py --trials 5 --timings stock --admin-action out-of-service
	PATH="$(BIN_PATH):$$PATH" $(PY) -P tools/bench/failover.py --trials 10 --term-trials 5 --nodes 4
	$(PY) -P tools/bench/plan_scale.py --nodes 1000 5000 20000
	PATH="$(BIN_PATH):$$PATH" $(PY) -P tools/bench/huge.py --nodes 10000 --rss-jobs 100 --rss-job-nodes 16
	PATH="$(BIN_PATH):$$PATH" $(PY) -P tools/bench/restart.py --nodes 1000 --restarts 3
	PATH="$(BIN_PATH):$$PATH" $(PY) -P tools/bench/drain.py --trials 3
	PATH="$(BIN_PATH):$$PATH" $(PY) -P tools/bench/in_place.py --trials 3
	PATH="$(BIN_PATH):$$PATH" $(PY) -P tools/bench/spare.py --trials 3
	PATH="$(BIN_PATH):$$PATH" $(PY) -P tools/bench/elastic.py --trials 3 --losses 10
	$(PY) -P tools/bench/report.py

clean:
	-$(PY) -m localcluster down
	rm -rf $(VENV) .pytest_cache
