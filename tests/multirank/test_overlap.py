"""``sync.overlap``: bucket sums started while backward runs give the inline sums, bit for bit (2 gloo ranks)."""

import copy
import json

import pytest

from zen_analysis import paths, recipes
from zen_analysis.dist.launch import launch


def _train(overlap: bool, **sync):
    cfg = recipes.smoke()
    tag = "-".join(f"{v}" for v in sync.values())
    cfg.name = cfg.run_id = f"overlap-{tag}-{'on' if overlap else 'off'}"
    cfg.train.num_steps = 4
    cfg.capture.every = 2  # steps 0 and 2 captured (summed after backward), 1 and 3 overlapped
    cfg.capture.topk_scope = "none"
    cfg.sync.bucket_mb = 0.1  # the smoke model's 0.24M parameters in about ten buckets
    cfg.sync.overlap = overlap
    for key, value in sync.items():
        setattr(cfg.sync, key, value)
    result = launch(copy.deepcopy(cfg), echo=False, progress=False, overwrite=True)
    summary = json.loads((paths.run_dir(cfg.run_id) / "summary.json").read_text())
    return result.metrics(), summary["param_sha256"]


@pytest.mark.parametrize("sync", [{"scheme": "allreduce"}, {"scheme": "zen"}, {"scheme": "zen", "compress": "topk"}],
                         ids=["dense", "natural-zen", "topk-zen"])
def test_overlapped_sums_equal_inline_bit_for_bit(sync):
    m_inline, digest_inline = _train(False, **sync)
    m, digest = _train(True, **sync)
    assert m["loss"].tolist() == m_inline["loss"].tolist()
    assert digest == digest_inline  # every parameter, bit for bit
    assert "overlap_s" not in m_inline
    overlapped = m[~m["captured"]]
    assert len(overlapped) == 2
    # the first bucket's sum started inside backward: part of the sums' time was hidden behind it
    assert (overlapped["overlap_s"] >= overlapped["hidden_s"]).all() and (overlapped["hidden_s"] > 0).all()
    captured = m[m["captured"]]  # summed after backward: nothing hidden
    assert (captured["hidden_s"] == 0).all()
