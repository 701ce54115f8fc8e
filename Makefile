# Two entry points: `make demo` and `make test`. Both build .venv from scratch when needed.
PYTHON ?= python3.11
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: demo test bench lint

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/reclock demo --workdir demo

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/pytest

bench: $(STAMP)
	$(VENV)/bin/python -m pipelines.bench $(ARGS)
