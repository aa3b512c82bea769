"""One training step of the Zen paper's LSTM and DeepFM, timed: the compute :mod:`~zen_analysis.paper.scale`
uses in place of its assumed peak x utilization wherever a GPU run measured it.

:func:`step_times` builds the two natural-sparsity workloads from the toolkit's own classes
(:class:`~zen_analysis.workload.models.LSTMLanguageModel`, :class:`~zen_analysis.workload.models.DeepFM`) and times
forward (with the loss), backward and the optimizer step apart. :func:`measured_compute` reads back what GPU runs
committed under ``data/gpu/<folder>/`` (``paper_compute.csv`` beside the folder's ``env.json``).

What the paper states (Table 1, section 5.1): the LSTM (AWD-LSTM on One Billion Word) has 20M dense ("MLP")
parameters and a 406M embedding, 793,471 words x 512, batch 128 sequences per GPU; DeepFM (Criteo) has 68M dense
parameters and a 214M-element embedding, 26 categorical fields and 13 dense features, batch 1,024 samples per GPU.
It states neither the LSTM's sequence length nor either model's layer widths. Our choices, not the paper's:

* LSTM: 2 layers of 512 (the toolkit's LSTM has one width, so the embedding's 512 is the hidden size) and an
  adaptive softmax (div_value 4, the class's) with cutoffs 8,192 / 32,768 / 131,072: ``lstm-words``' cutoffs times
  8 for a vocabulary 6 times its cap, which lands the dense count near 20M. Sequence length 128:
  ``recipes.lstm_words()``'s ``train.seq_len``. Ids are Zipf(1) over the frequency-sorted vocabulary (word frequencies
  follow Zipf's law): the adaptive softmax's cost depends on the cluster each target falls in, and uniform ids would
  put most targets in the rarest, widest cluster.
* DeepFM: 16-dim field embeddings (the ``deepfm`` recipe's; one extra column for the FM's first order), so 12,588,235
  rows x 17 = 214M elements; a DNN of five 4,096-wide layers, which lands the dense count near 68M. The 26 fields
  split the rows evenly and each field's id is uniform over its range (a lookup's cost does not depend on which row).
* Dense embedding gradients (``sparse=False``), no dropout, float32 (the paper trained in FP32), torch's default
  float32 matmul precision (recorded); the optimizer is the recipes' (``zen_analysis.train.setup``): AdamW, betas
  0.9 / 0.95, decay on matrices only, the recipe's lr and weight decay, fused where torch has the kernel, stepping
  every parameter, the table's every row included.

The counts these widths give are in the table (``dense_params``, ``table_rows``, ``table_dim``) and, without
allocating a table, in :func:`param_counts`.

Shape suffixes: B examples in a batch, T token positions of a sequence (one more before the shift), V vocabulary ids
(one CDF value each), F categorical fields, D dense features.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import pandas as pd
import torch

from zen_analysis import paths, recipes
from zen_analysis.atomic import atomic_write_text
from zen_analysis.train.optim import fused_adamw
from zen_analysis.workload.models import CTRInputs, DeepFM, LSTMLanguageModel

WORKLOADS = ("lstm", "deepfm")
SIZES = ("paper", "rehearse")
CSV_NAME = "paper_compute.csv"
ENV_KEYS = ("gpu_name", "date", "torch")
"""What :func:`measured_compute` takes from each GPU run's ``env.json`` beside its ``paper_compute.csv``."""


@dataclass(frozen=True)
class LSTMShape:
    """The LSTM LM timed: vocabulary (the table's rows), width (the table's columns and the LSTM's hidden size),
    layers, adaptive-softmax cutoffs, sequences per step and tokens per sequence."""

    vocab: int
    width: int
    layers: int
    cutoffs: tuple[int, ...]
    batch: int
    seq_len: int

    def build(self) -> LSTMLanguageModel:
        return LSTMLanguageModel(
            vocab_size=self.vocab, hidden_size=self.width, num_layers=self.layers, adaptive_cutoffs=self.cutoffs
        )


@dataclass(frozen=True)
class DeepFMShape:
    """The DeepFM timed: table rows, categorical fields, dense features, embedding dim (the table has ``dim + 1``
    columns), the DNN's widths and samples per step."""

    rows: int
    fields: int
    num_dense: int
    dim: int
    mlp: tuple[int, ...]
    batch: int

    def build(self) -> DeepFM:
        return DeepFM(
            num_rows=self.rows, num_fields=self.fields, num_dense=self.num_dense, dim=self.dim, mlp_sizes=self.mlp
        )


SHAPES = {
    "paper": {
        "lstm": LSTMShape(793_471, 512, 2, (8192, 32768, 131072), 128, recipes.lstm_words().train.seq_len),
        "deepfm": DeepFMShape(12_588_235, 26, 13, 16, (4096,) * 5, 1024),
    },
    "rehearse": {  # seconds on 2 CPU cores: the same code path, tiny
        "lstm": LSTMShape(4096, 64, 2, (256, 1024), 4, 16),
        "deepfm": DeepFMShape(10_000, 26, 13, 8, (64, 64), 64),
    },
}
"""The shapes timed per ``size``: ``paper`` (the module docstring's choices), ``rehearse`` (a CPU rehearsal)."""

RECIPES = {"lstm": recipes.lstm_words, "deepfm": recipes.deepfm}
"""Where each workload's optimizer settings (lr, weight decay) come from."""


def param_counts(size: str = "paper") -> pd.DataFrame:
    """Dense parameters (everything outside the embedding table) and the table's shape of each workload at ``size``,
    counted on the meta device: the models :func:`step_times` builds, with no memory allocated for them."""
    rows = []
    for workload, shape in _shapes(size).items():
        with torch.device("meta"):
            model = shape.build()
        rows.append({"workload": workload, **_counts(model)})
    return pd.DataFrame(rows)


def _shapes(size: str) -> dict:
    if size not in SHAPES:
        raise ValueError(f"size must be one of {list(SHAPES)}, got {size!r}")
    return SHAPES[size]


def _counts(model: torch.nn.Module) -> dict:
    """The table's rows and columns and the parameters outside it."""
    table = model.get_input_embeddings().weight
    total = sum(p.numel() for p in model.parameters())
    return {"dense_params": total - table.numel(), "table_rows": table.shape[0], "table_dim": table.shape[1]}


def _zipf_ids(vocab: int, shape: tuple[int, ...], gen: torch.Generator, device: torch.device) -> torch.Tensor:
    """int64 ids in [0, vocab) drawn with probability proportional to 1 / (id + 1): Zipf(1) over a frequency-sorted
    vocabulary, by inverse CDF."""
    cdf_V = torch.cumsum(1.0 / torch.arange(1, vocab + 1, dtype=torch.float64, device=device), 0)
    u = torch.rand(shape, generator=gen, dtype=torch.float64, device=device) * cdf_V[-1]
    return torch.searchsorted(cdf_V, u).clamp_(max=vocab - 1)


def _batch(shape, gen: torch.Generator, device: torch.device) -> tuple[object, torch.Tensor, str]:
    """One step's inputs and targets on ``device``, and how the ids were drawn."""
    if isinstance(shape, LSTMShape):
        ids_BT = _zipf_ids(shape.vocab, (shape.batch, shape.seq_len + 1), gen, device)
        return ids_BT[:, :-1], ids_BT[:, 1:], "zipf(1) over the vocabulary"
    per_field = shape.rows // shape.fields
    offsets_F = torch.arange(shape.fields, device=device) * per_field
    ids_BF = offsets_F + torch.randint(per_field, (shape.batch, shape.fields), generator=gen, device=device)
    dense_BD = torch.randn(shape.batch, shape.num_dense, generator=gen, device=device)
    clicks_B = torch.randint(2, (shape.batch,), generator=gen, device=device).float()
    return CTRInputs(ids_BF, dense_BD), clicks_B, "uniform within each field"


def _optimizer(workload: str, model: torch.nn.Module) -> torch.optim.Optimizer:
    """The recipes' AdamW (``zen_analysis.train.setup``): decay on matrices, none on vectors, betas 0.9 / 0.95."""
    train = RECIPES[workload]().train
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": train.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=train.lr, betas=(0.9, 0.95), fused=fused_adamw(model.parameters()))


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    return str(device)


def _time_workload(workload: str, shape, device: torch.device, *, repeats: int, warmup: int, seed: int) -> dict:
    """One workload's row of :func:`step_times`: ``warmup`` untimed steps, then ``repeats`` timed ones, each phase
    between two synchronizations of ``device``; the model and its optimizer freed afterwards."""
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    torch.manual_seed(seed)
    gen = torch.Generator(device=device).manual_seed(seed)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    with torch.device(device):  # the table is initialised where it lives: no host copy of 1.6 GB
        model = shape.build()
    optimizer = _optimizer(workload, model)
    inputs, targets, ids = _batch(shape, gen, device)
    phases: dict[str, list[float]] = {"forward_s": [], "backward_s": [], "optimizer_s": []}
    for i in range(warmup + repeats):
        optimizer.zero_grad(set_to_none=True)
        sync()
        t0 = time.perf_counter()
        loss = model.loss(inputs, targets)
        sync()
        t1 = time.perf_counter()
        loss.backward()
        sync()
        t2 = time.perf_counter()
        optimizer.step()
        sync()
        t3 = time.perf_counter()
        if i >= warmup:
            for name, t in zip(phases, (t1 - t0, t2 - t1, t3 - t2), strict=True):
                phases[name].append(t)
    row = {"workload": workload, **{k: statistics.median(v) for k, v in phases.items()}}
    row["step_s"] = row["forward_s"] + row["backward_s"] + row["optimizer_s"]
    row.update(_counts(model), batch=shape.batch, seq_len=getattr(shape, "seq_len", 1), ids=ids)
    row["optimizer"] = f"AdamW (fused={optimizer.defaults.get('fused')}, lr={optimizer.defaults['lr']:g})"
    row["dtype"] = str(model.get_input_embeddings().weight.dtype).removeprefix("torch.")
    row["matmul_precision"] = torch.get_float32_matmul_precision()
    row["peak_mem_bytes"] = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else float("nan")
    row["loss"] = float(loss.detach())
    del model, optimizer, inputs, targets, loss
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return row


def step_times(
    *, device: str | torch.device = "cuda", size: str = "paper", repeats: int = 5, warmup: int = 2, seed: int = 0
) -> pd.DataFrame:
    """One training step of each workload (:data:`WORKLOADS`) at ``size`` (:data:`SHAPES`) on ``device``, timed.

    A row per workload: the medians over ``repeats`` steps (after ``warmup`` untimed ones) of ``forward_s`` (the
    forward pass and its loss), ``backward_s`` and ``optimizer_s`` (AdamW's step over every parameter), each between
    two synchronizations of the device, and ``step_s``, their sum; the model's ``dense_params``, ``table_rows`` and
    ``table_dim``; ``batch`` (sequences or samples) and ``seq_len`` (1 for DeepFM: a sample is a token); how the
    ``ids`` were drawn; the ``optimizer``, ``dtype`` and ``matmul_precision``; ``device`` (with the GPU's name on
    CUDA); ``peak_mem_bytes`` (CUDA's peak allocated during the workload, NaN elsewhere); the last step's ``loss``.
    Each workload's model is freed before the next is built."""
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    if repeats < 1 or warmup < 0:
        raise ValueError(f"repeats must be >= 1 and warmup >= 0, got {repeats} and {warmup}")
    shapes = _shapes(size)
    rows = [_time_workload(w, s, dev, repeats=repeats, warmup=warmup, seed=seed) for w, s in shapes.items()]
    df = pd.DataFrame(rows)
    df.insert(1, "size", size)
    df["device"] = _device_name(dev)
    df["torch"] = torch.__version__
    df["repeats"] = repeats
    return df


def measured_compute(root: str | Path | None = None) -> pd.DataFrame:
    """Every GPU run's :func:`step_times` table under ``root`` (default :func:`zen_analysis.paths.gpu_dir`):
    ``<root>/<folder>/paper_compute.csv`` with ``folder`` and its ``env.json``'s :data:`ENV_KEYS` as columns (empty
    strings where the file lacks one). An empty table, with those columns, where there is none."""
    root = Path(root) if root is not None else paths.gpu_dir()
    frames = []
    for csv in sorted(root.glob(f"*/{CSV_NAME}")):
        env_path = csv.parent / "env.json"
        env = json.loads(env_path.read_text()) if env_path.exists() else {}
        df = pd.read_csv(csv)
        for key in ENV_KEYS:
            df[f"env_{key}" if key in df.columns else key] = str(env.get(key, ""))
        frames.append(df.assign(folder=csv.parent.name))
    if not frames:
        return pd.DataFrame(columns=["workload", "size", *ENV_KEYS, "folder"])
    return pd.concat(frames, ignore_index=True)


def measured_step(workload: str, card: str, *, root: str | Path | None = None) -> pd.Series | None:
    """The newest paper-size measurement of ``workload`` on a GPU whose name holds ``card`` (``"h100"`` matches
    ``"NVIDIA H100 80GB HBM3"``; the name is env.json's, or the table's ``device`` where env.json has none), from
    :func:`measured_compute`; None where no GPU run measured it."""
    df = measured_compute(root)
    if df.empty:
        return None
    device = df["device"].astype(str) if "device" in df.columns else ""
    names = (df["gpu_name"].astype(str) + " " + device).str.lower()
    hit = df[(df["workload"] == workload) & (df["size"] == "paper") & names.str.contains(card.lower(), regex=False)]
    if hit.empty:
        return None
    return hit.sort_values(["date", "folder"]).iloc[-1]


@dataclass(frozen=True)
class DeviceProfile:
    """One GPU's compute, as data: ``peak_flops`` at the precision named, times an assumed ``utilization`` (the
    fraction of peak a training step's matrix products reach: an assumption, not a measurement)."""

    name: str
    peak_flops: float
    precision: str
    utilization: float

    @property
    def flops(self) -> float:
        """FLOP/s a training step is assumed to sustain."""
        return self.peak_flops * self.utilization


DEVICES = {
    # datasheet peaks; the paper trained in FP32 on V100 (PyTorch 2.2, no mixed precision stated)
    "v100": DeviceProfile(name="V100 SXM2", peak_flops=15.7e12, precision="fp32", utilization=0.4),
    "a100": DeviceProfile(name="A100 SXM", peak_flops=156e12, precision="tf32 tensor cores", utilization=0.4),
    "h100": DeviceProfile(name="H100 SXM", peak_flops=989e12, precision="bf16 tensor cores, dense", utilization=0.4),
    "h200": DeviceProfile(name="H200 SXM", peak_flops=989e12, precision="bf16 tensor cores, dense", utilization=0.4),
}
"""Device profiles by name: peak FLOP/s and the utilization assumed for all of them (0.4). A name is also what picks a
GPU run's measured step (:func:`measured_step`: the GPU's name holds it)."""


class StepCompute(NamedTuple):
    """One GPU's compute per training step: all of it, its backward, and where the number comes from."""

    seconds: float
    backward: float
    source: str


def assumed_step(device: str, flops: float) -> StepCompute:
    """``flops`` of one step at ``device``'s assumed rate (:data:`DEVICES`: peak x utilization), 2/3 of it backward
    (backward computes two products per forward one); the source says so."""
    if device not in DEVICES:
        raise ValueError(f"unknown device {device!r}; choose from {sorted(DEVICES)}")
    dev = DEVICES[device]
    seconds = flops / dev.flops
    source = f"assumed: {dev.name}, {dev.precision}, {dev.peak_flops / 1e12:g} TFLOP/s x {dev.utilization:g}"
    return StepCompute(seconds, seconds * 2 / 3, source)


def measured_step_compute(
    workload: str, device: str, *, per_gpu: float, unit: str = "tokens", root: str | Path | None = None
) -> StepCompute | None:
    """A GPU run's measured step of ``workload`` on ``device`` (:func:`measured_step`), None where none exists: its
    forward and backward scaled by ``per_gpu`` over what the run timed (``unit`` "tokens": batch x sequence length;
    "samples": batch) where they differ, its optimizer step as measured (AdamW's step is per parameter, not per
    token); backward the measured one."""
    if unit not in ("tokens", "samples"):
        raise ValueError(f"unit must be 'tokens' or 'samples', got {unit!r}")
    row = measured_step(workload, device, root=root)
    if row is None:
        return None
    timed = float(row["batch"]) * (float(row["seq_len"]) if unit == "tokens" else 1.0)
    scale = per_gpu / timed
    fwd, bwd = float(row["forward_s"]) * scale, float(row["backward_s"]) * scale
    scaled = f", forward and backward x {scale:g} for the {unit} per GPU" if scale != 1 else ""
    source = f"measured on {row['gpu_name']}, {row['date']} (data/gpu/{row['folder']}){scaled}"
    return StepCompute(fwd + bwd + float(row["optimizer_s"]), bwd, source)


def main(argv: list[str] | None = None) -> pd.DataFrame:
    """``python -m zen_analysis.paper.compute --device cuda --size paper --out DIR``: :func:`step_times`
    printed, and written to ``DIR/paper_compute.csv`` with ``--out``."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--size", choices=SIZES, default="paper")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    df = step_times(device=args.device, size=args.size, repeats=args.repeats, warmup=args.warmup, seed=args.seed)
    with pd.option_context("display.width", 250, "display.max_columns", 30):
        print(df)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(args.out / CSV_NAME, df.to_csv(index=False))
        print(f"wrote {args.out / CSV_NAME}")
    return df


if __name__ == "__main__":
    main()
