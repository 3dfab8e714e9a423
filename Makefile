# The two set-up commands of the README: `make demo` and `make test`.
PY ?= python3
# The Kubernetes version the tests run against; `make test K8S_VERSION=v1.37.2` tests the newest minor.
K8S_VERSION ?= v1.34.4

.PHONY: install node-deps demo test lint

install:
	$(PY) -m pip install -q -e '.[dev]'

# The real node's parts that come from the distribution (runc, built with seccomp; iproute2).
# Installed when missing and this is a root shell with apt; elsewhere the real-node tests skip
# with the reason (under CI=true they fail instead).
node-deps:
	@if command -v runc >/dev/null 2>&1 && command -v ip >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq runc iproute2 >/dev/null; \
	else echo "node-deps: runc or iproute2 missing and cannot install them here (need root + apt)"; fi

demo: install node-deps
	$(PY) -m dra.cli cluster build
	$(PY) -m dra.cli node build
	$(PY) -m dra.cli demo

test: install node-deps
	$(PY) -m dra.cli cluster build --k8s-version $(K8S_VERSION)
	$(PY) -m dra.cli node build --k8s-version $(K8S_VERSION)
	DRA_TEST_K8S_VERSION=$(K8S_VERSION) $(PY) -m pytest

lint:
	$(PY) -m ruff check .
	$(PY) -m mypy dra drivers
