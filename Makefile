PY ?= python
PIP_INSTALL = $(PY) -m pip install -c constraints.txt

.PHONY: install dev test test-all lint docs bench clean

install:
	$(PIP_INSTALL) -e .

dev:
	$(PIP_INSTALL) -e ".[dev]"

test:
	$(PY) -m pytest -m "not slow" --nbmake tests notebooks

test-all:
	$(PY) -m pytest --nbmake tests notebooks

lint:
	$(PY) -m ruff check probdr models tests benchmarks

docs:
	$(PY) -m sphinx -W --keep-going -b html docs docs/_build/html

bench:
	$(PY) benchmarks/bench_digits.py

clean:
	rm -rf docs/_build .pytest_cache build *.egg-info
