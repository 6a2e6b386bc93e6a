# relaybench: set-up, tests and benchmarks.
#   make lab     create .venv if needed, install, start JupyterLab on notebooks/
#   make test    create or update .venv, install Chromium if missing (for tests/browser), run every
#                test, then every notebook under nbval
#   make fuzz    random programs on every executor against the interpreter (N, SEED, JOBS, FUZZ_OUT)

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.stamp
EXTRAS := test,lab,llvm
# Debian's Chromium drives the browser test (tests/browser). When it is missing, `make test`
# installs it with apt-get (as root, or through `sudo -n`); when that fails, the reason goes to
# CHROMIUM_LOG, the build goes on, and the browser test skips quoting it.
CHROMIUM     := /usr/bin/chromium
CHROMIUM_LOG := $(VENV)/chromium-install.log
# Extra flags for `make lab`; jupyter refuses to run as root without --allow-root (containers).
LAB_FLAGS ?= $(if $(filter 0,$(shell id -u)),--allow-root)

.PHONY: venv chromium lab test notebooks bench-scale fuzz clean distclean

venv: $(STAMP)

# Reinstall only when pyproject.toml (or the extras named here) changed since the last install.
# --no-compile: Python compiles the modules a process imports when it first does, not every
# module of every dependency at install time.
$(STAMP): pyproject.toml Makefile
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --no-compile -e '.[$(EXTRAS)]'
	@touch $@

# Never fails: an existing $(CHROMIUM) makes it a no-op; otherwise apt-get install, with
# apt-get update first when the package lists do not have it yet.
chromium: venv
	@test -x $(CHROMIUM) && exit 0; \
	rm -f $(CHROMIUM_LOG); \
	if [ "$$(id -u)" -eq 0 ]; then sudo=""; \
	elif sudo -n true >/dev/null 2>&1; then sudo="sudo -n"; \
	else echo "not root, and sudo -n is not available to run apt-get" > $(CHROMIUM_LOG); exit 0; fi; \
	if ! command -v apt-get >/dev/null 2>&1; then \
	    echo "apt-get not found (Debian's chromium package is what the test uses)" > $(CHROMIUM_LOG); exit 0; fi; \
	echo "installing Debian's chromium for the browser test"; \
	apt="$$sudo env DEBIAN_FRONTEND=noninteractive apt-get -q -y"; \
	{ $$apt install --no-install-recommends chromium || \
	  { $$apt update && $$apt install --no-install-recommends chromium; }; \
	} > $(CHROMIUM_LOG).out 2>&1; \
	if test -x $(CHROMIUM); then rm -f $(CHROMIUM_LOG) $(CHROMIUM_LOG).out; \
	else { echo "apt-get install chromium failed:"; tail -n 5 $(CHROMIUM_LOG).out; } > $(CHROMIUM_LOG); \
	    rm -f $(CHROMIUM_LOG).out; cat $(CHROMIUM_LOG); fi

lab: venv
	$(VENV)/bin/jupyter lab --ServerApp.ip=127.0.0.1 --ServerApp.root_dir=notebooks --no-browser $(LAB_FLAGS)

# Both steps always run; the target fails if either fails. The notebook step runs in its own
# pytest call (two workers, each notebook whole on one of them, --dist loadfile) and accepts
# exit status 5 (no notebooks collected); the unit-test step does not.
test: venv chromium
	@status=0; \
	$(PY) -m pytest -q -n 2 --dist worksteal --durations=25 tests && $(PY) -m pytest -q -n 2 --doctest-modules relaybench || status=1; \
	rc=0; \
	$(PY) -m pytest -q -n 2 --dist loadfile --nbval-lax --nbval-current-env \
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

# Random programs, seeds SEED .. SEED+N-1, in JOBS worker processes (default: one per core);
# failing programs, and one minimized program per failure class, go to FUZZ_OUT. Fails when any
# program does. Rerun one with `relaybench fuzz --replay FUZZ_OUT/FILE.rly`.
N        ?= 200
SEED     ?= 0
JOBS     ?= $(shell nproc 2>/dev/null || echo 2)
FUZZ_OUT ?= fuzz-out
fuzz: venv
	$(PY) -m relaybench fuzz --n $(N) --seed $(SEED) --jobs $(JOBS) --out $(FUZZ_OUT) --minimize

clean:
	rm -rf build dist .pytest_cache .hypothesis bench/out
	find . -path ./$(VENV) -prune -o \
	    \( -name __pycache__ -o -name '*.egg-info' -o -name .ipynb_checkpoints \) -prune \
	    -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)
