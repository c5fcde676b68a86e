# Entry points: `make demo`, `make test`. `make setup` is idempotent.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup test lint demo clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	bash scripts/setup-system.sh
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@

lint: setup
	$(BIN)/ruff check .

test: setup lint
	$(BIN)/python -m pytest -q tests

demo: setup
	$(BIN)/grouper order --workload builtin:fig3
	$(BIN)/grouper lower-bound --workload builtin:fig3

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache build *.egg-info
