# The README's two commands: `make demo` and `make test`. Both set up .venv first.
# `make test` runs `make lint` (ruff, the import contracts in pyproject.toml, mypy) and
# `make docs` (the documentation site, built strictly: a broken link fails), then pytest.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
WHEELHOUSE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/coinfer/wheels
PYTEST_ARGS ?=

.PHONY: setup demo test lint docs
setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml scripts/build-llama-wheel.sh scripts/lib/llama-source.sh \
		$(wildcard scripts/patches/*.patch) scripts/install-debian-packages.sh
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	scripts/install-debian-packages.sh
	$(BIN)/python -m pip install --quiet --upgrade pip
	wheel=$$(COINFER_WHEELHOUSE=$(WHEELHOUSE) PYTHON=$(BIN)/python scripts/build-llama-wheel.sh) \
		&& $(BIN)/python -m pip install --no-deps "$$wheel"
	$(BIN)/python -m pip install --find-links $(WHEELHOUSE) -e '.[all]'
	$(BIN)/coinfer models prepare
	touch $@

demo: setup
	$(BIN)/coinfer demo

test: lint docs
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

lint: setup
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests
	$(BIN)/lint-imports
	$(BIN)/mypy src
