"""The LSTM generator's law refitted on a fresh small capture (``lstm-words-smoke``, 2 gloo ranks x 4 workers of 4 x 64
tokens, 6 captured steps: seconds) reproduces that capture's overlap ratio, gamma and first-of-8 share within 10%:
the fit the stored ``LSTM_WORDS_FIT`` came from, run end to end on a capture."""

import pytest

from zen_analysis import recipes
from zen_analysis.runs.launch import launch
from zen_analysis.sparsity.paper_workloads import lstm_words_workload
from zen_analysis.sparsity.workload_fit import fit_capture, set_statistics


def test_a_refit_on_a_small_capture_reproduces_its_statistics(tmp_path, monkeypatch):
    monkeypatch.setenv("ZEN_ANALYSIS_DATA", str(tmp_path))
    cfg = recipes.lstm_words_smoke()
    cfg.run_id = "paper-workload-fit"
    cfg.capture.topk_scope, cfg.capture.every = "none", 1
    cfg.train.workers_per_rank, cfg.train.batch_per_worker = 4, 4
    cfg.validate()
    launch(cfg, progress=False, echo=False)
    fit = fit_capture(cfg.run_id)
    captured = fit.fitted_on
    assert captured.workers == cfg.num_workers and captured.steps == cfg.train.num_steps
    assert fit.tokens == 4 * cfg.train.seq_len and 1.0 < fit.exponent < 1.6
    w = lstm_words_workload(fit)
    got = set_statistics([w.row_sets(captured.workers, step=s) for s in range(40)], w.num_rows)
    for key in ("rows", "overlap", "gamma", "share0"):
        assert getattr(got, key) == pytest.approx(getattr(captured, key), rel=0.1), key
