# The two commands of README.md:  make book  (build the book)  and  make test  (run the tests).
# Both create the virtual environment .venv when it is missing.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
SCALE ?= small
# The default build goes to _build/html; other scales get their own folder and execution cache.
OUT := $(if $(filter small,$(SCALE)),.,_build/$(SCALE))
MATHJAX := book/_static/mathjax/tex-chtml.js
# Idle OpenMP threads sleep instead of spinning: on a small or shared CPU, spinning threads
# made small convolutions several times slower with 2 threads than with 1.
export OMP_WAIT_POLICY ?= PASSIVE

.PHONY: book test clean chromium slurm gpu-data

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[book,test]'
	touch $@

# MathJax 3 from the npm registry, served by the built book so math typesets offline.
$(MATHJAX):
	rm -rf book/_static/mathjax _build/mathjax-pack && mkdir -p _build/mathjax-pack
	cd _build/mathjax-pack && npm pack --silent mathjax@3 > /dev/null && tar -xzf mathjax-*.tgz
	mv _build/mathjax-pack/package/es5 book/_static/mathjax && rm -rf _build/mathjax-pack

# The chapters are executed BOOK_JOBS at a time (auto: one per core, at most 4) before the build renders them.
BOOK_JOBS ?= auto
book: $(VENV)/.installed $(MATHJAX)
	GMP_SCALE=$(SCALE) $(PY) -m gmp.bookcache --path-output $(OUT) --jobs $(BOOK_JOBS)
	GMP_SCALE=$(SCALE) $(VENV)/bin/jupyter-book build . --path-output $(OUT) -W -n --keep-going
	@echo "The book is in $(OUT)/_build/html/index.html"

# The browser test's headless Chromium: installed when missing where possible, else the command is printed.
chromium:
	@.ci/chromium

# The real-Slurm test's slurm-wlm and munge: installed when missing where possible, else the test skips saying how.
slurm:
	@.ci/slurm

# The tests on every core (pytest-xdist), one thread each; the tests that share a costly set-up (the Colab
# runtime; the smoke book and the chapter runs it reuses) stay together on one worker (WORKER_GROUPS, tests/conftest.py).
TEST_WORKERS ?= auto
test: chromium slurm $(VENV)/.installed $(MATHJAX)
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(PY) -m pytest -n $(TEST_WORKERS)

clean:
	rm -rf _build

# The data the GPU command (python -m gmp.gpu) reads, copied from GMP_DATA into _data/ (ignored by
# git) so that it travels beside the checkout to a GPU machine: MNIST's four packed files and the
# small data sets of the smoke chapters, about 24 MB.
gpu-data:
	@test -n "$(GMP_DATA)" || { echo "set GMP_DATA to the folder that holds the data (see README)"; exit 1; }
	mkdir -p _data/MNIST/raw
	cp $(GMP_DATA)/MNIST/raw/*.gz _data/MNIST/raw/
	for d in banana images mnist1d uci uci_raw; do test ! -d $(GMP_DATA)/$$d || cp -r $(GMP_DATA)/$$d _data/; done
	@du -sh _data
