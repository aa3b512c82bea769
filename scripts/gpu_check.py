"""The GPU check: what one borrowed GPU shows of Zen, as files (docs/guide/gpus.md says how to run it, blind).

Started by ``scripts/gpu_check.sh`` with the machine's own ``python3`` and the checkout on ``PYTHONPATH``: no venv,
no pip, no network. Each step runs in a subprocess under its own time limit, so a slow or hung step (an NCCL
rendezvous that never completes) costs its limit and no more; the limits add up to 8 minutes.

=========  ================================================================================================
env        the machine (GPU, driver, torch, CUDA, NCCL), the packages the toolkit needs (a missing one is named),
           and the torch features it detects (``zen_analysis.wire.torch_features``)
tests      ``tests/gpu`` under pytest: Algorithm 1 and the hash bitmap on CUDA against the CPU, every scheme's
           push/pull at world size 1 over NCCL, the default recipe trained with Zen, Zen-FSDP2's reduce-scatter
fig16      Algorithm 1's bucketing time at the paper's size (214M elements, densities 1-10%), Fig. 16
compute    one training step of the paper's LSTM and DeepFM, forward, backward and optimizer apart
multirank  four ranks over gloo holding CUDA tensors on the one GPU: which collectives gloo runs there, every
           scheme's sum against a dense all-reduce, Zen-FSDP2's reduce-scatter; and two NCCL ranks on one GPU
=========  ================================================================================================

``--rehearse`` runs the same steps on CPU at small sizes (gloo where the GPU run uses NCCL), so ``make test`` keeps
the check from rotting. Files under ``--out`` (``$OUT``, else ``data/derived/gpu_check``), at most 8 and one folder
deep, as the borrowed machine hands back: ``env.json``, ``steps.csv``, ``check.log``, ``gpu_tests.log``,
``fig16_hashing_cost.csv``, ``paper_compute.csv``, ``multirank.csv``.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import importlib.metadata
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STEPS = {"env": 30, "tests": 240, "fig16": 60, "compute": 60, "multirank": 90}
"""Each step's time limit on the GPU, in seconds: 8 minutes together."""
REHEARSAL_SCALE = 2
"""The rehearsal's limits are the GPU's times this: 2 CPU cores run the small sizes slower than an H100 the large."""
NEEDED_BY_CHECK = ("torch", "numpy", "pandas", "transformers", "tokenizers", "safetensors", "tqdm", "pytest")
"""The distributions the check's steps import; the others of pyproject's dependencies serve other paths."""
SERVES = {
    "datasets": "hub and local-file corpora (data.hf_*); the default corpus does not use it",
    "pyarrow": "the trace store's Parquet files",
    "matplotlib": "figures",
    "seaborn": "figures",
}
"""What a dependency the check may lack is for, named beside it when missing."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rehearse", action="store_true", help="the same steps on CPU at small sizes")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or ROOT / "data/derived/gpu_check"))
    parser.add_argument("--step", choices=sorted(STEPS), help="run one step in this process (the driver's child)")
    parser.add_argument("--only", nargs="+", choices=sorted(STEPS), help="run these steps only")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.step:
        return STEP_FUNCTIONS[args.step](args.out, args.rehearse) or 0
    return drive(args.out, args.rehearse, args.only or list(STEPS))


def drive(out: Path, rehearse: bool, steps: list[str]) -> int:
    """Every step in a child process under its limit; ``steps.csv`` gets a row per step and ``check.log`` all output.
    Returns 1 if any step failed or ran out of time."""
    log_path, rows = out / "check.log", []
    mode = "rehearsal on CPU" if rehearse else "GPU run"
    with log_path.open("w") as log:
        _say(log, f"zen-analysis GPU check, {mode}, {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC")
        for name in steps:
            limit = STEPS[name] * (REHEARSAL_SCALE if rehearse else 1)
            _say(log, f"\n== {name} (limit {limit} s)")
            cmd = [sys.executable, str(Path(__file__).resolve()), "--step", name, "--out", str(out)]
            status, seconds = _run_limited([*cmd, *(["--rehearse"] if rehearse else [])], limit, log)
            rows.append({"step": name, "status": status, "seconds": f"{seconds:.1f}", "limit_s": limit})
            _say(log, f"== {name}: {status} in {seconds:.1f} s")
        with (out / "steps.csv").open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
        failed = [r["step"] for r in rows if r["status"] != "ok"]
        _say(log, f"\n{len(rows) - len(failed)} of {len(rows)} steps ok" + (f"; not ok: {failed}" if failed else ""))
        _say(log, f"files in {out}: {', '.join(sorted(p.name for p in out.iterdir()))}")
    return 1 if failed else 0


def _say(log, line: str) -> None:
    print(line, flush=True)
    log.write(line + "\n")
    log.flush()


def _run_limited(cmd: list[str], limit: float, log) -> tuple[str, float]:
    """``cmd`` in its own process group, its output copied line by line to stdout and ``log``; killed with its
    children (torchrun's ranks) at ``limit`` seconds. Returns ``("ok" | "failed (exit N)" | "timed out", seconds)``."""
    t0 = time.monotonic()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True, cwd=ROOT
    )

    def copy() -> None:
        for line in proc.stdout:
            sys.stdout.write(line)
            log.write(line)

    copier = threading.Thread(target=copy, daemon=True)
    copier.start()
    try:
        status = "ok" if proc.wait(timeout=limit) == 0 else f"failed (exit {proc.returncode})"
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        status = "timed out"
    copier.join(timeout=5)
    log.flush()
    return status, time.monotonic() - t0


def _device(rehearse: bool) -> str:
    return "cpu" if rehearse else "cuda"


def step_env(out: Path, rehearse: bool) -> int:
    """``env.json``: the machine, the packages (missing ones named, with what they serve) and torch's features."""
    import torch

    import zen_analysis
    from zen_analysis.wire.torch_features import features

    env = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
        "rehearsal": rehearse,
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "zen_analysis_from": str(Path(zen_analysis.__file__).parent),
        "features": features(),
        "packages": _packages(),
        **_gpu(torch, rehearse),
    }
    (out / "env.json").write_text(json.dumps(env, indent=1) + "\n")
    print(json.dumps({k: v for k, v in env.items() if k != "packages"}, indent=1))
    missing = [name for name, version in env["packages"].items() if version is None]
    for name in missing:
        needed = "NEEDED by the check" if name in NEEDED_BY_CHECK else SERVES.get(name, "not needed by the check")
        print(f'missing package: {name} ({needed}); bring it as a wheel (docs/guide/gpus.md, "A missing package")')
    if not rehearse and not env["cuda_available"]:
        print("no CUDA device visible to torch: this is not a GPU machine (use --rehearse on CPU)")
        return 1
    return 1 if set(missing) & set(NEEDED_BY_CHECK) else 0


def _packages() -> dict[str, str | None]:
    """pyproject's dependencies and the check's own, each with its installed version or None."""
    import tomllib

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = [re.split(r"[<>=!~\[ ;]", d, maxsplit=1)[0] for d in deps] + ["pytest", "pytest-timeout"]
    found = {}
    for name in dict.fromkeys(names):
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found


def _gpu(torch, rehearse: bool) -> dict:
    """The GPU's name, memory and capability, the driver (from nvidia-smi) and torch's CUDA and NCCL versions."""
    info = {"cuda_available": torch.cuda.is_available(), "cuda": torch.version.cuda, "gpu_count": 0}
    if rehearse or not torch.cuda.is_available():
        return {**info, "gpu_name": "none (CPU rehearsal)" if rehearse else "none", "driver": None}
    props = torch.cuda.get_device_properties(0)
    smi = shutil.which("nvidia-smi")
    driver = None
    if smi:
        query = [smi, "--query-gpu=driver_version", "--format=csv,noheader"]
        driver = subprocess.run(query, capture_output=True, text=True, check=False).stdout.strip() or None
    nccl = torch.cuda.nccl.version() if torch.distributed.is_nccl_available() else None
    return {
        **info,
        "gpu_count": torch.cuda.device_count(),
        "gpu_name": props.name,
        "gpu_memory_gib": round(props.total_memory / 2**30, 1),
        "capability": f"{props.major}.{props.minor}",
        "multiprocessors": props.multi_processor_count,
        "driver": driver,
        "nccl": ".".join(map(str, nccl)) if isinstance(nccl, tuple) else nccl,
    }


def step_tests(out: Path, rehearse: bool) -> int:
    """``gpu_tests.log``: pytest over ``tests/gpu`` (``ZEN_GPU_REHEARSE=1`` runs them on CPU with gloo)."""
    env = {**os.environ, **({"ZEN_GPU_REHEARSE": "1"} if rehearse else {})}
    cmd = [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "tests/gpu"]
    with (out / "gpu_tests.log").open("w") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in proc.stdout:
            sys.stdout.write(line)
            log.write(line)
        return proc.wait()


def step_fig16(out: Path, rehearse: bool) -> int:
    """``fig16_hashing_cost.csv``: Algorithm 1 beside the argsort reference, at the paper's 214M elements (the
    rehearsal: 1M), densities 1-10% with the paper's 5.2% among them."""
    from zen_experiments.hashing_cost import hashing_cost

    numel, repeats = (1 << 20, 2) if rehearse else (214_000_000, 5)
    df = hashing_cost(numel=numel, densities=(0.01, 0.02, 0.052, 0.1), device=_device(rehearse), repeats=repeats)
    df.to_csv(out / "fig16_hashing_cost.csv", index=False)
    print(df.to_string(index=False))
    return 0


def step_compute(out: Path, rehearse: bool) -> int:
    """``paper_compute.csv``: one training step of the paper's LSTM and DeepFM, its phases timed apart."""
    from zen_analysis.paper.compute import step_times

    df = step_times(device=_device(rehearse), size="rehearse" if rehearse else "paper")
    df.to_csv(out / "paper_compute.csv", index=False)
    print(df.to_string(index=False))
    return 0


def step_multirank(out: Path, rehearse: bool) -> int:
    """``multirank.csv``: what several ranks on one GPU can run (see :mod:`gpu_check_ranks`)."""
    sys.path.insert(0, str(Path(__file__).parent))
    from gpu_check_ranks import multirank

    rows = multirank(_device(rehearse), ranks=4)
    with (out / "multirank.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["kind", "name", "world", "device", "ok", "detail"])
        writer.writeheader()
        writer.writerows(rows)
    for r in rows:
        print(f"{r['kind']:<12} {r['name']:<34} world {r['world']} {r['device']:<5} {r['ok']!s:<5} {r['detail']}")
    schemes = [r for r in rows if r["kind"] in ("scheme", "fsdp")]
    return 0 if schemes and all(r["ok"] for r in schemes) else 1


STEP_FUNCTIONS = {
    "env": step_env,
    "tests": step_tests,
    "fig16": step_fig16,
    "compute": step_compute,
    "multirank": step_multirank,
}

if __name__ == "__main__":
    sys.exit(main())
