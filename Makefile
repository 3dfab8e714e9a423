# The two set-up commands of the README: `make demo` and `make test`.
PY ?= python3

.PHONY: install demo test lint

install:
	$(PY) -m pip install -q -e '.[dev]'

demo: install
	$(PY) -m dra.cli cluster build
	$(PY) -m dra.cli demo

test: install
	$(PY) -m dra.cli cluster build
	$(PY) -m pytest

lint:
	$(PY) -m ruff check .
	$(PY) -m mypy dra drivers
