# The two set-up commands of the README: `make demo` and `make test`.
PY ?= python3
# The Kubernetes version the tests run against; `make test K8S_VERSION=v1.37.2` tests the newest minor.
K8S_VERSION ?= v1.34.4

.PHONY: install demo test lint

install:
	$(PY) -m pip install -q -e '.[dev]'

demo: install
	$(PY) -m dra.cli cluster build
	$(PY) -m dra.cli demo

test: install
	$(PY) -m dra.cli cluster build --k8s-version $(K8S_VERSION)
	DRA_TEST_K8S_VERSION=$(K8S_VERSION) $(PY) -m pytest

lint:
	$(PY) -m ruff check .
	$(PY) -m mypy dra drivers
