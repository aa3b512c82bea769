"""Sparse pseudo-gradients of local SGD (``local_sgd.compress``, ``capture.pseudo``): the slow-link sweep, the
natural sparsity of pseudo-gradients, and their characterization beside the gradients' (notebook 06,
``zen-analysis bench netlab --set parts=pseudo``, ``zen-analysis bench pseudo_density``)."""

from __future__ import annotations

import pandas as pd

from zen_analysis import paths, recipes
from zen_analysis.capture.pseudo import PSEUDO_KINDS
from zen_analysis.capture.reader import TraceReader
from zen_analysis.config import apply_overrides
from zen_analysis.sparsity.characterize import characterize
from zen_analysis.sparsity.report import claims_table
from zen_analysis.sparsity.workloads import combined_tables, workload_labels
from zen_experiments.local_sgd_runs import local_tokens_per_s, method_run

__all__ = ["pseudo_gradient_claims"]

SHORT_SYNC = {"local_sgd.warmup_steps": 4, "local_sgd.interval": 8, "local_sgd.ewma_warmup": 3}
"""The short local-SGD runs' cadence (benches, scripts, ``make reproduce-full``): 4 synchronous steps, then an outer
sync every 8 steps, EDiT's anomaly detector armed after 3 syncs (with ``EDIT_TUNED``: plain averaging)."""


def short_base(recipe: str, name: str, *, steps: int, ranks: int | None = None, overrides=()):
    """``recipe`` for a short local-SGD run: one micro-batch per rank, ``steps`` steps, no evaluation during the run,
    ``ranks`` ranks (the recipe's if None), then the dotted ``overrides``."""
    base = recipes.get(recipe)
    base.name = name
    base.train.workers_per_rank = 1
    base.train.num_steps = steps
    base.train.eval_every = 0
    if ranks is not None:
        base.dist.num_ranks = ranks
    return apply_overrides(base, list(overrides))


def outer_sync_row(summary: dict, tokens_per_step: int) -> dict:
    """What a local-SGD run on a slow link is judged by, from :func:`method_run`'s summary: tokens/s (whole run, and
    after the synchronous warm-up), validation loss, this rank's bytes and seconds per outer sync (medians; NaN
    without outer syncs), the outer syncs' count, the run id."""
    sync = summary.get("sync") or {}
    return {
        "tokens_per_s": summary["tokens_per_s"],
        "local_tokens_per_s": local_tokens_per_s(summary, tokens_per_step),
        "val_loss": summary["val_loss"],
        "bytes_per_sync": sync.get("bytes_per_sync", float("nan")),
        "outer_sync_s": sync.get("outer_sync_s", float("nan")),
        "syncs": sync.get("syncs", 0),
        "run_id": summary["run_id"],
    }


PSEUDO_VARIANTS = {
    "ddp": ("dense", {}),
    "edit": ("edit", {}),
    "diloco": ("diloco", {}),
    **{
        f"{method}+topk+{scheme}": (method, {"local_sgd.compress": "topk", "sync.scheme": scheme})
        for method in ("edit", "diloco")
        for scheme in ("zen", "agsparse", "omnireduce")
    },
}
"""The slow-link comparison of sparse pseudo-gradients (label -> (``sync.method``, settings)): synchronous DDP,
dense EDiT and DiLoCo, and both with top-k pseudo-gradients summed by Zen, AGsparse and OmniReduce."""


def pseudo_gradient_sweep(
    base,
    *,
    ranks=(4,),
    bandwidths=(0.5,),
    variants=None,
    progress: bool = False,
    **settings,
) -> pd.DataFrame:
    """Each variant of :data:`PSEUDO_VARIANTS` (or those named in ``variants``) trained on ``base`` with every rank
    behind a link of each bandwidth in the emulated network (``dist.network=netlab``), at each rank count, the same
    steps. One row per run: tokens/s (whole run, and after the synchronous warm-up: ``local_tokens_per_s``; DDP's is
    its whole run), validation loss at the end (equal tokens), this rank's bytes and
    seconds per outer sync (medians; the DDP row has no outer sync), the outer syncs' count; ``attrs["metrics"]``:
    rank 0's per-step rows with ``elapsed_s`` (loss against wall-clock time). ``settings`` apply to every run."""
    names = list(variants or PSEUDO_VARIANTS)
    unknown = sorted(set(names) - set(PSEUDO_VARIANTS))
    if unknown:
        raise ValueError(f"unknown variants {unknown}; available: {list(PSEUDO_VARIANTS)}")
    tokens_per_step = base.train.workers_per_rank * base.train.batch_per_worker * base.train.seq_len
    rows, frames = [], []
    for n in ranks:
        for gbps in bandwidths:
            for name in names:
                method, extra = PSEUDO_VARIANTS[name]
                s = method_run(
                    base,
                    method,
                    tag=f"{name.replace('+', '-')}-r{n}-{gbps:g}g",
                    progress=progress,
                    **settings,
                    **extra,
                    **{"dist.num_ranks": n, "dist.network": "netlab", "dist.bandwidth_gbps": gbps},
                )
                rows.append({"variant": name, "ranks": n, "bandwidth_gbps": gbps, **outer_sync_row(s, tokens_per_step)})
                m = s["metrics"].assign(variant=name, ranks=n, bandwidth_gbps=gbps)
                m["elapsed_s"] = m["step_s"].cumsum()
                frames.append(m)
    out = pd.DataFrame(rows)
    for _, cell in out.groupby(["ranks", "bandwidth_gbps"]):
        for method in ("edit", "diloco"):
            if method in set(cell["variant"]):
                dense = cell.loc[cell["variant"] == method].iloc[0]
                mine = cell["variant"].str.startswith(method)
                out.loc[cell.index[mine], "speedup_vs_dense"] = cell.loc[mine, "tokens_per_s"] / dense["tokens_per_s"]
                out.loc[cell.index[mine], "local_speedup_vs_dense"] = (
                    cell.loc[mine, "local_tokens_per_s"] / dense["local_tokens_per_s"]
                )
                out.loc[cell.index[mine], "val_gap_vs_dense"] = cell.loc[mine, "val_loss"] / dense["val_loss"] - 1
    out.attrs["metrics"] = pd.concat(frames, ignore_index=True)
    return out


DENSITY_UPDATES = {
    "adamw": {},
    "adamw, no weight decay": {"train.weight_decay": 0.0},
    "lazy embedding": {"train.embedding_update": "lazy"},
}
"""How the inner optimizer steps the embedding, for :func:`pseudo_gradient_density`: AdamW over every row with the
recipe's weight decay (the default), AdamW without weight decay (``train.weight_decay`` is the whole model's), and
the lazy row update (``train.embedding_update=lazy``: untouched rows keep weights and moments)."""


def pseudo_gradient_density(bases, *, updates=None, progress: bool = False, **settings) -> pd.DataFrame:
    """Natural sparsity of pseudo-gradients: each config of ``bases`` trained with EDiT under each inner update of
    :data:`DENSITY_UPDATES` (or those named in ``updates``), ``settings`` applied to every run; from every rank's
    sync log, the density (non-zero share of the elements) of the input embedding's pseudo-gradient and of the rest,
    per worker and outer sync, before any selection. One row per (recipe, update): the embedding's density (median
    and extremes over workers and syncs), its sync group's (it may share one with other parameters: the Llama's
    root module holds the untied LM head too), the embedding's share of the model, and the other groups' density
    (median, least)."""
    names = list(updates or DENSITY_UPDATES)
    rows = []
    for base in bases:
        for update in names:
            s = method_run(
                base,
                "edit",
                tag=update.replace(", ", "-").replace(" ", "-"),
                progress=progress,
                **settings,
                **DENSITY_UPDATES[update],
            )
            log = pd.concat(
                [
                    pd.read_json(p, lines=True)
                    for p in sorted((paths.run_dir(s["run_id"]) / "local_sgd").glob("*.jsonl"))
                ]
            )
            synced = log[log["init"].ne(True) & log["anomalous"].eq(False)] if "init" in log else log
            is_emb = synced["embedding"].fillna(False).astype(bool)  # NaN on the init rows' float column
            emb, rest = synced[is_emb], synced[~is_emb]
            if emb.empty:
                raise ValueError(f"{base.name}: no sync group holds the input embedding (granularity=global?)")
            rows.append(
                {
                    "recipe": base.name,
                    "update": update,
                    "embedding_density": float(emb["embedding_density"].median()),
                    "embedding_density_min": float(emb["embedding_density"].min()),
                    "embedding_density_max": float(emb["embedding_density"].max()),
                    "group_density": float(emb["density"].median()),
                    "embedding_share": float(
                        emb["embedding_numel"].iloc[0]
                        / (emb["numel"].iloc[0] + rest.groupby("group")["numel"].first().sum())
                    ),
                    "other_density_median": float(rest["density"].median()) if len(rest) else float("nan"),
                    "other_density_min": float(rest["density"].min()) if len(rest) else float("nan"),
                    "syncs": int(emb["step"].nunique()),
                    "val_loss": s["val_loss"],
                    "run_id": s["run_id"],
                }
            )
    return pd.DataFrame(rows)


def pseudo_gradient_claims(
    base, *, method: str = "edit", mode: str = "all", progress: bool = False, **settings
) -> pd.DataFrame:
    """The Zen paper's characterization claims (C1-C3) for pseudo-gradients beside the gradients': ``base`` trained
    with ``method`` and top-k pseudo-gradients (``local_sgd.compress=topk`` through Zen) while capturing both the
    gradients (``base``'s capture settings, every ``local_sgd.interval`` steps) and the pseudo-gradients
    (``capture.pseudo=mode``; ``sent``: the selections only, for models whose dense before-selection records would
    be large), then characterized. The claims table (:func:`zen_analysis.sparsity.report.claims_table`) with a
    ``signal`` column (gradient / pseudo-gradient); ``attrs["tables"]``: the characterization tables,
    ``attrs["run_id"]``, ``attrs["summary"]``: the run's summary."""
    local = {"local_sgd.compress": "topk", "sync.scheme": "zen", **settings}
    interval = int(local.get("local_sgd.interval", 8))
    local.setdefault("capture.every", interval)
    s = method_run(
        base,
        method,
        tag=f"pseudo-{mode}",
        progress=progress,
        **{"capture.enabled": True, "capture.pseudo": mode},
        **local,
    )
    characterize(s["run_id"], progress=progress)
    tables = combined_tables([s["run_id"]])
    claims = claims_table(tables)
    reader = TraceReader(s["run_id"])
    labels = workload_labels(reader)
    signal = {
        labels[t]: "pseudo-gradient" if info["kind"] in PSEUDO_KINDS else "gradient"
        for t, info in reader.manifest["tensors"].items()
    }
    claims.insert(0, "signal", claims["workload"].map(signal))
    claims = claims.sort_values(["claim", "signal"], kind="stable", ignore_index=True)
    claims.attrs.update(tables=tables, run_id=s["run_id"], summary=s)
    return claims
