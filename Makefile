PY ?= python
PIP_INSTALL = $(PY) -m pip install -c constraints.txt

.PHONY: install dev test test-all lint docs bench clean device-wheels

install:
	$(PIP_INSTALL) -e .

dev:
	$(PIP_INSTALL) -e ".[dev]"

test:
	$(PY) -m pytest -m "not slow" -n 2 --nbmake tests notebooks

test-all:
	$(PY) -m pytest --nbmake tests notebooks

lint:
	$(PY) -m ruff check probdr models tests benchmarks docs/check_html.py

# the wheels benchmarks/device_check.py needs on a GPU machine without a package registry
# (Python 3.12, manylinux x86-64; benchmarks/DEVICE.md), into .whl/ (ignored by git)
device-wheels:
	$(PY) -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
		--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
		--platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
		--platform manylinux2014_x86_64 -d .whl -r benchmarks/device_wheels.txt

docs:
	$(PY) -m sphinx -W --keep-going -b html docs docs/_build/html
	$(PY) docs/check_html.py docs/_build/html

# the benchmark suite (benchmarks/suite.py): by default probdr's t-SNE and UMAP beside openTSNE
# and umap-learn on the bundled digits, each fit in its own process, a few minutes on 2 cores; it
# adds the fits to benchmarks/results/suite.jsonl and rewrites docs/benchmarks.md. The whole
# suite (every data set and peer, about an hour): make bench BENCH_ARGS=
BENCH_ARGS ?= --data digits --methods probdr-tsne opentsne probdr-umap umap-learn

bench:
	$(PY) benchmarks/suite.py $(BENCH_ARGS)

clean:
	rm -rf docs/_build docs/notebooks .pytest_cache build *.egg-info
