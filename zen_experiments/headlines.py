"""The headline values a lab benchmark's page quotes as a range over its runs (:attr:`~zen_experiments.benchmarks.
Benchmark.headline`): each takes what the benchmark returned and gives ``label -> value``, a ratio labelled with its
cell (ranks, link, workload) and ``(x)`` where it is one; a part the run did not have gives no label.
"""

from __future__ import annotations

import pandas as pd

__all__ = ["ddp", "exchange", "fsdp", "lab_check", "netlab", "train"]


def ddp(result: dict) -> dict[str, float]:
    """``bench ddp``'s headline: each Zen variant's step against stock DDP's ``sparse=True`` path, per network."""
    summary = result["ddp"]
    out = {}
    for network, g in summary.groupby("network", sort=False):
        steps = g.set_index("variant")["step_s_median"]
        for variant in ("natural", "natural-sparse"):
            if "stock-sparse" in steps and variant in steps and steps[variant] > 0:
                out[f"{variant} vs stock sparse=True, {network} (x)"] = float(steps["stock-sparse"] / steps[variant])
    return out


def exchange(result: dict) -> dict[str, float]:
    """``bench exchange``'s headline: Zen's lead over stock DDP's sparse all-reduce, per rank count and link, and
    over the users' contiguous row ownership (``sparse_ps``) where the table has it."""
    df = result["exchange"]
    zen = df[df["scheme"] == "zen"]
    out = {
        f"Zen vs stock sparse, {n} ranks, {bw:g} Gbit/s (x)": float(lead)
        for n, bw, lead in zip(zen["ranks"], zen["bandwidth_gbps"], zen["lead_vs_stock"])
    }
    contiguous = df[df["scheme"] == "sparse_ps"].set_index(["ranks", "bandwidth_gbps"])["lead_vs_stock"]
    for n, bw, lead in zip(zen["ranks"], zen["bandwidth_gbps"], zen["lead_vs_stock"]):
        if (n, bw) in contiguous.index:
            out[f"Zen vs contiguous rows, {n} ranks, {bw:g} Gbit/s (x)"] = float(lead / contiguous[(n, bw)])
    return out


def fsdp(summary: pd.DataFrame) -> dict[str, float]:
    """``bench fsdp``'s headline: each Zen variant's step and embedding reduce-scatter against stock FSDP2's."""
    out = {}
    for n, variant, step, embed in zip(summary.ranks, summary.variant, summary.step_speedup, summary.embed_rs_speedup):
        if variant.startswith("zen"):
            out[f"{variant} step vs stock, {n} ranks (x)"] = float(step)
            out[f"{variant} embedding reduce-scatter vs stock, {n} ranks (x)"] = float(embed)
    return out


def lab_check(result: dict) -> dict[str, float]:
    """``bench lab-check``'s headline per rank count: Zen's step lead over dense all-reduce, measured and modelled,
    and the largest |modelled / measured - 1| over the schemes, on the idle-refitted calibration and on the stored
    one."""
    df = result["lab_check"]
    out = {}
    for n, g in df.groupby("ranks"):
        by = g.set_index("scheme")
        if {"zen", "allreduce"} <= set(by.index):
            out[f"Zen vs all-reduce step, measured, {n} ranks (x)"] = float(
                by.loc["allreduce", "measured_s"] / by.loc["zen", "measured_s"]
            )
            out[f"Zen vs all-reduce step, modelled, {n} ranks (x)"] = float(
                by.loc["allreduce", "modelled_s"] / by.loc["zen", "modelled_s"]
            )
        out[f"largest model / measured - 1, {n} ranks"] = float((g["ratio"] - 1).abs().max())
        if "ratio_netlab" in g:
            out[f"the same, stored calibration, {n} ranks"] = float((g["ratio_netlab"] - 1).abs().max())
    return out


def netlab(result: dict) -> dict[str, float]:
    """``bench netlab``'s headline at 1 Gbit/s: Zen's replayed sum against dense all-reduce's per tensor kind and rank
    count (``schemes``), hierarchical Zen (sparse in node) against flat Zen per link (``nodes``), and each trained
    Zen variant's tokens/s against dense training's (``train``); each part where the run had it."""
    out = {}
    if "schemes" in result:
        df = result["schemes"]
        zen = df[(df["scheme"] == "zen") & (df["bandwidth_gbps"] == 1.0)]
        for kind, n, speedup in zip(zen["kind"], zen["ranks"], zen["speedup_measured"]):
            out[f"Zen vs all-reduce sum, {kind}, {n} ranks, 1 Gbit/s (x)"] = float(speedup)
    if "nodes" in result:
        for bw, g in result["nodes"].groupby("bandwidth_gbps", sort=False):
            by = g.set_index("method")["measured_s_median"]
            if {"zen", "zen hierarchical, sparse in node"} <= set(by.index):
                out[f"hierarchical Zen vs flat Zen, 2 nodes, {bw:g} Gbit/s (x)"] = float(
                    by["zen"] / by["zen hierarchical, sparse in node"]
                )
    if "train" in result:
        for bw, g in result["train"].groupby("bandwidth_gbps", sort=False):
            by = g.set_index("variant")["tokens_per_s"]
            for variant in (v for v in by.index if "zen" in v and "dense" in by):
                out[f"{variant} vs dense training, tokens/s, {bw:g} Gbit/s (x)"] = float(by[variant] / by["dense"])
    return out


def train(result: dict) -> dict[str, float]:
    """``bench train``'s headline: Zen's tokens/s over dense all-reduce's per workload, rank count and rate
    (``natural``), top-k + Zen's time to the dense run's loss over dense's (``topk``), and the share of Zen's sum
    that overlap hid behind backward (``overlap``); each part where the run had it."""
    out = {}
    if "natural" in result:
        zen = result["natural"][result["natural"]["variant"] == "zen"]
        for workload, n, bw, speedup in zip(zen["workload"], zen["ranks"], zen["bandwidth_gbps"], zen["speedup"]):
            out[f"Zen vs all-reduce tokens/s, {workload}, {n} ranks, {bw:g} Gbit/s (x)"] = float(speedup)
    if "topk" in result:
        topk = result["topk"].set_index("variant")
        if "topk+zen" in topk.index:
            out["top-k + Zen time to dense's loss vs dense (x)"] = float(topk.loc["topk+zen", "time_to_loss_vs_dense"])
    if "overlap" in result:
        overlap = result["overlap"].set_index("variant")
        if "zen+overlap" in overlap.index:
            out["share of Zen's sum hidden by overlap"] = float(overlap.loc["zen+overlap", "hidden_fraction"])
    return out
