# The two set-up commands of the README: `make demo` and `make test` (plus `make lint`).
# Everything runs in a project virtual environment, .venv, which make creates and fills; set
# PY=/path/to/python to use another environment instead (then nothing is created).
PYTHON ?= python3
VENV ?= .venv
PY ?= $(VENV)/bin/python
# The Kubernetes version the tests run against; `make test K8S_VERSION=v1.37.2` tests the newest minor.
K8S_VERSION ?= v1.34.4

# The install stamp: redone when the project's metadata or build glue change.
STAMP := $(dir $(PY)).dra-installed

.PHONY: install node-deps c-deps demo test test-security test-versions lint docs clean-venv wheel image image-deps

install: $(STAMP)

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)

# Two distributions: the runtime (this directory, with the NVIDIA driver's extra and the test
# tools) and the dev rig (dev/: control plane, real node, demo), which adds `dra cluster|node|demo`.
$(STAMP): pyproject.toml setup.py dev/pyproject.toml constraints-dev.txt | $(if $(filter $(VENV)/bin/python,$(PY)),$(VENV)/bin/python)
	$(PY) -m pip install -q -c constraints-dev.txt -e '.[dev,nvidia]' -e ./dev
	@touch $@

# The real node's parts that come from the distribution (runc, built with seccomp; iproute2).
# Installed when missing and this is a root shell with apt; elsewhere the real-node tests skip
# with the reason (under CI=true they fail instead).
node-deps:
	@if command -v runc >/dev/null 2>&1 && command -v ip >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq runc iproute2 >/dev/null; \
	else echo "node-deps: runc or iproute2 missing and cannot install them here (need root + apt)"; fi
	@if command -v iptables >/dev/null 2>&1 || [ -x /usr/sbin/iptables ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends iptables >/dev/null; \
	else echo "node-deps: iptables missing (kube-proxy's Service network needs it) and cannot install it here"; fi

# clang, the second C compiler of the hook's tests (tests/hook/test_clang_build.py; under CI=true
# they fail without it). Installed when missing and this is a root shell with apt, like node-deps.
c-deps:
	@if command -v clang >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang >/dev/null; \
	else echo "c-deps: clang missing and cannot install it here (need root + apt)"; fi

demo: install node-deps
	$(PY) -m dra.cli cluster build
	$(PY) -m dra.cli node build
	$(PY) -m dra.cli demo

test: install node-deps image-deps c-deps
	$(PY) -m dra.cli cluster build --k8s-version $(K8S_VERSION)
	$(PY) -m dra.cli node build --k8s-version $(K8S_VERSION)
	DRA_TEST_K8S_VERSION=$(K8S_VERSION) $(PY) -m pytest

# The adversarial suite alone (fast, for reviewers): one hostile case per input path a tenant
# controls, each named in docs/trust-boundary.md. Cases that need the embedded control plane or
# the real node use what `make test` built (and skip with the reason where it is missing).
test-security: install c-deps
	$(PY) -m pytest -q tests/security

# The scheduler-facing tests (pytest marker `scheduler`: allocation, spread, the fences, the
# examples, webhook translation) on every Kubernetes minor from 1.34 the Go module proxy serves
# (`dra cluster versions`; K8S_VERSIONS="v1.34.4 v1.37.2" picks some), each built on first use
# (about 11 minutes of two cores per version). Every version runs; the summary names failures.
# Where scheduler-marked tests live (node, hook and watchdog tests need no scheduler).
SCHEDULER_TEST_DIRS ?= tests/unit tests/integration tests/charts tests/hami_core_gpu tests/ascend tests/hygon_dcu
K8S_VERSIONS ?= $(shell $(PY) -m dra.cli cluster versions 2>/dev/null || echo v1.34.4 v1.35.4 v1.36.3 v1.37.2)
test-versions: install
	@failed=""; for v in $(K8S_VERSIONS); do \
	  $(PY) -m dra.cli cluster build --k8s-version $$v >/dev/null || { failed="$$failed $$v(build)"; continue; }; \
	  echo "== scheduler-facing tests on Kubernetes $$v"; \
	  DRA_TEST_K8S_VERSION=$$v $(PY) -m pytest -m scheduler -q -p no:cacheprovider $(SCHEDULER_TEST_DIRS) || failed="$$failed $$v"; \
	done; \
	if [ -n "$$failed" ]; then echo "test-versions: failed on$$failed"; exit 1; fi; \
	echo "test-versions: passed on $(K8S_VERSIONS)"

lint: install docs
	$(PY) -m ruff check .
	$(PY) -m mypy
	$(dir $(PY))lint-imports

# The docs site (mkdocs.yml, `strict: true`): fails on a broken link or anchor between the pages of
# docs/ or a page outside the nav; built into a temporary dir and thrown away (a check, not a deploy).
docs: install
	@site=$$(mktemp -d) && trap 'rm -rf "$$site"' EXIT && $(PY) -m mkdocs build --strict --site-dir "$$site"

clean-venv:
	rm -rf $(VENV)

# The wheel the container image installs (Dockerfile: `make wheel`); tests/charts/test_image.py
# builds it with this same target and runs the charts' commands from it. DIST=dir to place it.
DIST ?= dist
wheel:
	$(PY) -m pip wheel -q --no-deps --no-build-isolation --wheel-dir $(DIST) .

# The image the charts run, built from the Dockerfile with buildah on a base made from Debian's
# packages by mmdebstrap (dev/dra_dev/node/project_image.py says why): dist/dra-hami-<version>.oci.tar.
# image-deps installs the two builders where missing (root + apt), like node-deps.
image-deps:
	@if command -v buildah >/dev/null 2>&1 && command -v mmdebstrap >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	    buildah mmdebstrap >/dev/null; \
	else echo "image-deps: buildah or mmdebstrap missing and cannot install them here (need root + apt)"; fi

image: install image-deps
	$(PY) -m dra.cli node image
