#!/usr/bin/env bash
# GPU checks for Zen on a machine with at least one CUDA device (see README, "GPUs"):
#   1. the GPU tests (Algorithm 1 and the hash bitmap on CUDA vs CPU, every scheme's push/pull on CUDA at
#      world size 1 over NCCL, NCCL training with Zen, Zen-FSDP2's sparse reduce-scatter on CUDA over NCCL; 2-GPU
#      parity (DDP and FSDP2) when two devices are present);
#   2. the Fig. 16 timing at the paper's size (214M elements, densities 1-10%) on the GPU, written to
#      $OUT (or data/derived/gpu_check) as CSV.
# Usage: scripts/gpu_check.sh   (run from the repository root; creates .venv with `make venv` if needed)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || make venv
OUT_DIR=${OUT:-data/derived/gpu_check}
mkdir -p "$OUT_DIR"
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
"$PY" -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.cuda.get_device_name(0))"
"$PY" -m pytest -q tests/gpu 2>&1 | tee "$OUT_DIR/gpu_tests.txt"
"$PY" - "$OUT_DIR" <<'PYEOF'
import sys
from zen_analysis.experiments.hashing_cost import hashing_cost
df = hashing_cost(numel=214_000_000, densities=(0.01, 0.02, 0.05, 0.1), device="cuda", repeats=5)
df.to_csv(f"{sys.argv[1]}/fig16_hashing_cost_cuda.csv", index=False)
print(df.to_string(index=False))
PYEOF
