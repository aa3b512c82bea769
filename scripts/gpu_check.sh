#!/usr/bin/env bash
# The GPU check, for a borrowed GPU machine as it comes (docs/guide/gpus.md, "Running the GPU check"):
#   scripts/gpu_check.sh              on the GPU: env, tests, fig16, compute, multirank; 8 minutes at most
#   scripts/gpu_check.sh --rehearse   the same steps on CPU at small sizes (make test runs it)
# It uses the machine's own python3 ($PY to name another) with this checkout on PYTHONPATH: no venv, no pip, no
# network. Wheels left in .whl/ (a package the machine lacks) are unpacked onto the path first, without pip.
# Files land in $OUT, else data/derived/gpu_check/ (scripts/gpu_check.py lists them).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg PIP_NO_INDEX=1
export PYTORCH_NVML_BASED_CUDA_CHECK=1  # asking whether CUDA is there initialises no driver: ranks fork after it
export ZEN_ANALYSIS_DATA=${ZEN_ANALYSIS_DATA:-$(mktemp -d -t zen-gpu-check-XXXXXX)}  # runs, traces, caches
if compgen -G ".whl/*.whl" >/dev/null; then
    site=$(mktemp -d -t zen-gpu-check-site-XXXXXX)
    for wheel in .whl/*.whl; do "$PY" -m zipfile -e "$wheel" "$site"; done  # a wheel is a zip of its files
    export PYTHONPATH="$site:$PYTHONPATH"
    echo "unpacked onto the path: $(cd .whl && ls *.whl | tr '\n' ' ')"
fi
exec "$PY" scripts/gpu_check.py "$@"
