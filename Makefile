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

.PHONY: install demo test lint clean-venv

install: $(STAMP)

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml setup.py | $(if $(filter $(VENV)/bin/python,$(PY)),$(VENV)/bin/python)
	$(PY) -m pip install -q -e '.[dev]'
	@touch $@

demo: install
	$(PY) -m dra.cli cluster build
	$(PY) -m dra.cli demo

test: install
	$(PY) -m dra.cli cluster build --k8s-version $(K8S_VERSION)
	DRA_TEST_K8S_VERSION=$(K8S_VERSION) $(PY) -m pytest

lint: install
	$(PY) -m ruff check .
	$(PY) -m mypy
	$(dir $(PY))lint-imports

clean-venv:
	rm -rf $(VENV)
