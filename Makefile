# Two entry points: `make run` (the daemon on a demo folder) and `make test` (the test suite).
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
DEMO := var

.PHONY: run test benchmark benchmark-quick clean-demo

# The venv is rebuilt when pyproject.toml changes; the stamp records a finished install.
$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

run: $(VENV)/.installed
	mkdir -p $(DEMO)/watch $(DEMO)/out $(DEMO)/state
	test -e $(DEMO)/watch/tiny_cnn.onnx || $(BIN)/tcl-tuned example tiny_cnn --out $(DEMO)/watch/tiny_cnn.onnx
	$(BIN)/tcl-tuned daemon --config examples/demo.toml

test: $(VENV)/.installed
	$(BIN)/python -m pytest

benchmark: $(VENV)/.installed
	$(BIN)/python -m benchmarks run

benchmark-quick: $(VENV)/.installed
	$(BIN)/python -m benchmarks run --quick

clean-demo:
	rm -rf $(DEMO)
