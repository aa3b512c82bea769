"""The README's deterministic numbers are compared with the files make reproduce writes (here: files written by
the test, one number changed; make reproduce itself runs the comparison on its own files)."""

from pathlib import Path

from zen_analysis.experiments.readme import documented_text, mismatches

README = documented_text(Path(__file__).parents[2])  # the README and the guide's pages

CAPTURE = """run reproduce-default (finished): llama, 4 ranks x 8 workers = 32 workers, steps [0] captured, 1 MB
corpus stdlib (31.5 MB, sha256 0), vocab 8192, git 0
final loss {loss}, val loss 5.2643, 4790 tokens/s
                   tensor    kind    shape   numel  steps  workers  density_mean  density_min  density_max    nnz_mean
model.embed_tokens.weight natural 8192x256 2097152      6       32        0.0246       0.0179       0.0326  51600.0000
"""

PARITY = """      variant  final_loss     reference  max_abs_loss_diff  median_step_s  median_sparse_bytes_rank0
    allreduce    6.602353     allreduce           0.000000       0.595571                        NaN
          zen    6.602352     allreduce           0.000001       0.537067                   {zen_bytes}
"""


def _write(tmp_path: Path, loss: str, zen_bytes: str) -> Path:
    (tmp_path / "capture_summary.txt").write_text(CAPTURE.format(loss=loss))
    (tmp_path / "parity_summary.txt").write_text(PARITY.format(zen_bytes=zen_bytes))
    return tmp_path


def test_the_readme_tables_are_read_and_compared(tmp_path):
    compared, wrong = mismatches(README, _write(tmp_path, "5.2282", "614890.0"))
    assert compared == 6 and not wrong  # 2 losses and a density; 2 parity losses and Zen's bytes
    compared, wrong = mismatches(README, _write(tmp_path, "5.2291", "614891.0"))
    assert wrong == [
        "reproduce-default final train loss: README 5.228, capture_summary.txt 5.229",
        "parity embedding via Zen (by rows) bytes: README 614,890, parity_summary.txt 614,891",
    ]


def test_every_number_of_the_claims_table_is_one_claims_md_holds(tmp_path):
    from zen_analysis.experiments.readme import _cells, _claim_numbers

    section = README.split("## Sparsity characterization")[1].split("| claim | paper |")[1].split("\n\n")[0]
    rows = [_cells(ln) for ln in section.splitlines()[2:]]  # the claims table's rows, C1-C3 and DeepFM
    quoted = sorted({n for cells in rows for n in _claim_numbers(cells[2])})
    assert {"72.4", "87%", "0.77", "42.2"} <= set(quoted)
    held = " ".join(n for n in quoted if n != "72.4")  # claims.md without the LSTM's skewness
    (tmp_path / "claims.md").write_text(
        f"| claim | workload | paper says | we measure | holds |\n|---|---|---|---|---|\n"
        f"| C | w | p | {held} | True |\n"
    )
    compared, wrong = mismatches(README, tmp_path)
    assert compared >= len(quoted) and wrong == [
        "claims 'C3 skewness > 70 at 128 partitions (LSTM)': README 72.4, not in claims.md"
    ]
