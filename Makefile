# relaybench: set-up, tests and benchmarks.
#   make lab     create .venv if needed, install, start JupyterLab on notebooks/
#   make test    create or update .venv, run every test, then every notebook under nbval

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.stamp
EXTRAS := test,lab,llvm
# Extra flags for `make lab`; jupyter refuses to run as root without --allow-root (containers).
LAB_FLAGS ?= $(if $(filter 0,$(shell id -u)),--allow-root)

.PHONY: venv lab test notebooks bench-scale clean distclean

venv: $(STAMP)

# Reinstall only when pyproject.toml (or the extras named here) changed since the last install.
$(STAMP): pyproject.toml Makefile
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -e '.[$(EXTRAS)]'
	@touch $@

lab: venv
	$(VENV)/bin/jupyter lab --ServerApp.ip=127.0.0.1 --ServerApp.root_dir=notebooks --no-browser $(LAB_FLAGS)

# Both steps always run; the target fails if either fails. The notebook step
# runs in its own pytest call (no xdist) and accepts exit status 5 (no notebooks
# collected); the unit-test step does not.
test: venv
	@status=0; \
	$(PY) -m pytest -q -n 2 tests && $(PY) -m pytest -q --doctest-modules relaybench || status=1; \
	rc=0; \
	$(PY) -m pytest -q --nbval-lax --nbval-current-env \
	    --nbval-sanitize-with notebooks/sanitize.cfg notebooks/ || rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "notebooks: none collected"; \
	elif [ $$rc -ne 0 ]; then status=1; fi; \
	exit $$status

# Rewrite the tutorial notebooks from notebooks/src/ and execute them (their saved outputs are
# what nbval checks).
notebooks: venv
	$(PY) notebooks/src/build.py

bench-scale: venv
	$(PY) bench/scale.py

clean:
	rm -rf build dist .pytest_cache .hypothesis bench/out
	find . -path ./$(VENV) -prune -o \
	    \( -name __pycache__ -o -name '*.egg-info' -o -name .ipynb_checkpoints \) -prune \
	    -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)
