"""Rank side of the scheme evaluation: replay index sets through every scheme on real gloo ranks and set the
measurement beside the model.

``compare(index_sets, numel)`` forks one rank per set, fills each rank's tensor with integer values on its
set, runs every scheme (warm-up, repeats), checks the result against ``all_reduce``, and returns one row per
(scheme, phase): bytes modelled / bytes sent (summed over ranks, payload and control) and whether they are
equal, wire seconds modelled (alpha-beta on a topology, ``local`` by default) / measured (slowest rank,
median over repeats, barrier before each collective) and their ratio, plus the whole phase's wall time
(local encode/decode included).
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import torch


def _replay(rank: int, world: int, sets: list, numel: int, repeats: int, names: list[str]) -> list:
    import torch.distributed as dist

    from zen_analysis.comm import build_scheme

    gen = torch.Generator().manual_seed(rank)
    x = torch.zeros(numel)
    idx = torch.as_tensor(sets[rank], dtype=torch.long)
    x[idx] = torch.randint(1, 5, (idx.numel(),), generator=gen).float()
    ref = x.clone()
    dist.all_reduce(ref)
    rows = []
    for name in names:
        scheme = build_scheme(name)
        scheme.sync_collectives = True
        for rep in range(repeats + 2):  # 2 warm-up runs
            out = scheme.run(x)
            if rep < 2:
                continue
            m = scheme.last_measured()
            for phase, g in m.groupby("phase"):
                rows.append({
                    "scheme": name, "rep": rep, "phase": phase, "rank": rank,
                    "bytes_sent": int(g["bytes_sent"].sum()), "phase_s": float(g["seconds"].sum()),
                    "wire_s": float(g["wire_seconds"].sum()), "lossless": bool(torch.equal(out, ref)),
                })  # fmt: skip
    return rows


def compare(
    index_sets: Sequence[torch.Tensor], numel: int, *, repeats: int = 5, topology=None, schemes: Sequence[str] | None = None
) -> pd.DataFrame:
    """Measured vs modelled bytes and time per (scheme, phase) for one rank per index set."""
    from zen_analysis.comm import SCHEMES, build_scheme
    from zen_analysis.comm.topology import preset
    from zen_analysis.dist.launch import fork_launch

    world = len(index_sets)
    topo = topology or preset("local")
    names = [n for n in (schemes or SCHEMES) if not (n == "sparcml" and world & (world - 1))]
    sets = [torch.as_tensor(s, dtype=torch.long).tolist() for s in index_sets]
    raw = pd.DataFrame([r for rows in fork_launch(_replay, world, sets, numel, repeats, names) for r in rows])
    per_rep = raw.groupby(["scheme", "phase", "rep"]).agg(
        bytes_sent=("bytes_sent", "sum"), wire_s=("wire_s", "max"), phase_s=("phase_s", "max"), lossless=("lossless", "all")
    )
    measured = per_rep.groupby(["scheme", "phase"]).agg(
        bytes_sent=("bytes_sent", "first"), wire_s=("wire_s", "median"), phase_s=("phase_s", "median"), lossless=("lossless", "all")
    )
    out = []
    for (name, phase), m in measured.iterrows():
        scheme = build_scheme(name)
        model_bytes = int(scheme.traffic(index_sets, numel).query("phase == @phase")["bytes_sent"].sum())
        model_s = float(scheme.time(index_sets, numel, topo).set_index("phase").loc[phase, "seconds"])
        out.append({
            "scheme": name, "phase": phase, "bytes_model": model_bytes, "bytes_sent": int(m["bytes_sent"]),
            "bytes_equal": model_bytes == int(m["bytes_sent"]), "lossless": bool(m["lossless"]),
            "wire_model_s": model_s, "wire_measured_s": float(m["wire_s"]), "ratio": model_s / float(m["wire_s"]),
            "phase_measured_s": float(m["phase_s"]),
        })  # fmt: skip
    return pd.DataFrame(out)
