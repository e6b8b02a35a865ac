# The course's commands. `make book` and `make test` each set up .venv by
# themselves; see the README.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CHAPTERS := $(notdir $(wildcard solutions/[0-9][0-9]_*))
# nbgrader calls helpers (alembic) by name: the venv's bin comes first.
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: help setup book test lint release lock clean

help:
	@echo "make book     build the book (executes the chapters)"
	@echo "make test     run the whole test suite"
	@echo "make release  regenerate chapters/ from solutions/ (nbgrader)"
	@echo "make lint     ruff over course_lib, tests and notebooks"
	@echo "make lock     re-pin constraints.txt from requirements.txt"

# The environment is rebuilt when it is missing or older than the files
# that describe it.
$(STAMP): requirements.txt constraints.txt pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check \
		-r requirements.txt
	$(BIN)/python -m pip install --quiet --disable-pip-version-check \
		--no-deps --no-build-isolation -e .
	@touch $@

setup: $(STAMP)

book: $(STAMP)
	$(BIN)/jupyter-book build . --warningiserror --nitpick --keep-going
	@echo "The book: $(CURDIR)/_build/html/index.html"

test: $(STAMP)
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check course_lib tests solutions

release: $(STAMP)
	$(BIN)/python -m course_lib.release $(CHAPTERS)

lock:
	rm -rf .lock-venv && $(PYTHON) -m venv .lock-venv
	.lock-venv/bin/python -m pip install --quiet \
		$$(grep -v -e '^-c' -e '^#' requirements.txt | cut -d' ' -f1)
	{ echo "# Full lock of the environment (pip freeze); edit"; \
	  echo "# requirements.txt, then regenerate this file with make lock."; \
	  .lock-venv/bin/python -m pip freeze | sed 's/+cpu$$//'; \
	} > constraints.txt
	rm -rf .lock-venv

clean:
	rm -rf _build _build_solutions
