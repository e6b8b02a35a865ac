# The course's commands (`make help` lists them). `make book` and
# `make test` each set up .venv by themselves.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CHAPTERS := $(notdir $(wildcard solutions/[0-9][0-9]_*))
# nbgrader calls helpers (alembic) by name: the venv's bin comes first.
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: help setup book book-solutions book-pages system-packages test \
	test-fast lint \
	release student-edition lock clean \
	grade feedback bench-grade

# Each command's line in `make help` is the `## ...` after its target.
help: ## list the commands, one line each
	@awk 'BEGIN {FS = ":.*## "} /^[a-z][a-z-]*:.*## / \
		{printf "make %-16s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# The environment is rebuilt when it is missing or older than the files
# that describe it. Two projects, both editable: the library course_lib
# (pyproject.toml) and the course's tooling course_tools (its own
# pyproject.toml), which every target below runs on the course here.
$(STAMP): requirements.txt constraints.txt pyproject.toml \
		course_tools/pyproject.toml scripts/setup-venv
	scripts/setup-venv $(PYTHON) $(VENV)
	@touch $@

setup: $(STAMP) ## create .venv: pinned packages, course_lib, course_tools

# Strict (a warning or a cell error fails), cached in _build/.jupyter_cache;
# a chapter re-executes when the course_lib code it imports changes.
book: $(STAMP) ## build the book into _build/html (runs the chapters)
	$(BIN)/python -m course_tools.book student --root .

# Solutions and hidden tests behind toggles; not executed
# (instructors/releasing.md).
book-solutions: $(STAMP) ## the instructors' edition (from solutions/)
	$(BIN)/python -m course_tools.book solutions --root .

# The pages besides the chapters alone, as strict, nothing executed.
book-pages: $(STAMP) ## only the pages besides the chapters (seconds)
	$(BIN)/python -m course_tools.book pages --root .

# Two Debian packages that some tests need, installed with apt-get when
# missing (CI runs as root on a fresh machine); says which and why, once.
SYSTEM_PACKAGES := chromium:/usr/bin/chromium \
	postgresql:/usr/lib/postgresql/*/bin/initdb
system-packages: ## apt-get chromium and postgresql for make test (root)
	@echo "make test needs chromium (the book's pages, opened headless)" \
		"and postgresql (a class graded into a real PostgreSQL server)"
	@missing=; for entry in $(SYSTEM_PACKAGES); do \
		package=$${entry%%:*}; \
		if ls $${entry#*:} >/dev/null 2>&1; then \
			echo "  $$package: installed"; \
		else missing="$$missing $$package"; fi; \
	done; \
	if [ -n "$$missing" ]; then \
		echo "  installing$$missing with apt-get (about a minute)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -qq --no-install-recommends $$missing \
		>/dev/null; \
	fi

# Everything, as CI runs it, on every core (pytest-xdist): the book's
# build and the grading batch run once in the background while the other
# tests run; tests sharing a fixture share a worker; tests marked alone
# run last, with none beside them (tests/conftest.py).
XDIST := -n auto --dist loadgroup --no-loadscope-reorder
test: $(STAMP) system-packages ## the whole test suite, as CI runs it
	$(BIN)/python -m pytest $(XDIST)

# The unit and in-process grading tests: under a minute, no kernel.
test-fast: $(STAMP) ## unit and in-process tests (no kernel, under a minute)
	$(BIN)/python -m pytest $(XDIST) -m "not e2e"

lint: $(STAMP) ## ruff over library, tools, tests, benchmarks, notebooks
	$(BIN)/ruff check course_lib course_tools tests benchmarks scripts solutions

# Grade the class: every submission in submitted/<student>/<assignment>/,
# e.g. make grade ARGS="01_attention_coefficients --jobs 4 --force", or
# one student: make grade ARGS="--student ada".
grade: $(STAMP) ## autograde submitted/ (ARGS="--jobs 4 --student ID ...")
	$(BIN)/python -m course_tools.classroom --course . $(ARGS)

# After hand grading in the formgrader (instructors/term.md).
feedback: $(STAMP) ## rebuild feedback/ and grades.csv from the gradebook
	$(BIN)/python -m course_tools.classroom --course . --feedback $(ARGS)

bench-grade: $(STAMP) ## time make grade against serial nbgrader
	$(BIN)/python benchmarks/grade_class.py $(ARGS)

release: $(STAMP) ## regenerate chapters/ and the README's chapter table
	$(BIN)/python -m course_tools.release --root . $(CHAPTERS)

# What students get, from an allow-list (instructors/releasing.md), e.g.
# ARGS="--book _build/html --strip-answers".
student-edition: $(STAMP) ## the student edition into _student/ (ARGS=...)
	$(BIN)/python -m course_tools.edition --root . $(ARGS)

lock: ## re-pin constraints.txt from requirements.txt
	rm -rf .lock-venv && $(PYTHON) -m venv .lock-venv
	.lock-venv/bin/python -m pip install --quiet \
		$$(grep -v -e '^-c' -e '^#' requirements.txt | cut -d' ' -f1)
	{ echo "# Full lock of the environment (pip freeze); edit"; \
	  echo "# requirements.txt, then regenerate this file with make lock."; \
	  .lock-venv/bin/python -m pip freeze | sed 's/+cpu$$//'; \
	} > constraints.txt
	rm -rf .lock-venv

clean: ## remove the built books (_build*)
	rm -rf _build _build_solutions _build_pages
