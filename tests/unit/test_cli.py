"""The command line as a user meets it: help with defaults and examples, listing and deleting runs, reproduce's
stages by name."""

import json

import pytest

from zen_analysis import paths
from zen_analysis.interface.cli import EXAMPLES, build_parser, main
from zen_analysis.interface.cli_options import parse


def _fake_run(run_id, *, finished, trace_bytes=1000):
    run = paths.run_dir(run_id)
    (run / "results").mkdir(parents=True)
    (run / "config.json").write_text(
        json.dumps({"name": "smoke", "dist": {"num_ranks": 2}, "train": {"workers_per_rank": 2, "num_steps": 6}})
    )
    if finished:
        (run / "results" / "rank0.json").write_text("{}")
    traces = paths.trace_dir(run_id)
    traces.mkdir(parents=True)
    (traces / "shard.parquet").write_bytes(b"x" * trace_bytes)


def test_every_subcommand_shows_its_defaults_and_examples(capsys):
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert set(EXAMPLES) <= set(sub.choices)
    for name, p in sub.choices.items():
        text = p.format_help()
        assert "examples:" in text or name not in EXAMPLES
        for action in p._actions:
            if action.default not in (None, False) and action.help and action.dest != "help":
                assert "default" in (action.help + p.formatter_class("x")._get_help_string(action)), (name, action.dest)
    assert "\n  ranks=4 " in sub.choices["replay"].format_help()  # a --set key with its default


@pytest.mark.parametrize(
    ("command", "flags", "sets"),
    [
        ("replay", ["--ranks", "2", "--bandwidth-gbps", "0.5"], ["ranks=2", "bandwidth=0.5"]),
        ("evaluate", ["--max-workers", "64", "--topology", "paper-tcp25"],
         ["max_workers=64", "topologies=paper-tcp25"]),
        ("characterize", ["--hash-seed", "3", "--natural-granularity", "element"],
         ["hash_seed=3", "natural_granularity=element"]),
        ("netlab", ["--nodes", "4", "--ranks-per-node", "2"], ["nodes=4", "ranks_per_node=2"]),
    ],
)  # fmt: skip
def test_every_command_takes_its_values_as_set_and_its_former_flags_with_a_notice(capsys, command, flags, sets):
    """One grammar: the values a command takes are ``--set key=value`` (``train``'s and ``bench``'s already); the
    flags they replaced still parse, hidden, into the same values, with one notice naming the ``--set``."""
    parser = build_parser()
    run = [] if command == "netlab" else ["some-run"]
    new = parse(command, parser.parse_args([command, *run, *(a for s in sets for a in ("--set", s))]))
    assert capsys.readouterr().err == ""
    old = parse(command, parser.parse_args([command, *run, *flags]))
    assert old == new and old != parse(command, parser.parse_args([command, *run]))
    notice = capsys.readouterr().err
    assert notice.count("note:") == 1 and all(f"--set {s}" in notice for s in sets)
    assert (
        flags[0] not in next(a for a in parser._actions if a.dest == "command").choices[command].format_help()
    )  # hidden
    assert parse(command, parser.parse_args([command, *run, *flags, "--set", sets[0].split("=")[0] + "=7"])) != old


def test_a_set_key_a_command_lacks_or_a_value_that_does_not_convert_is_refused_naming_its_keys():
    parser = build_parser()
    with pytest.raises(SystemExit, match=r"replay takes --set ranks, steps, .*; got 'rank=4'"):
        parse("replay", parser.parse_args(["replay", "--set", "rank=4"]))
    with pytest.raises(SystemExit, match=r"got 'ranks=four' \(invalid literal"):
        parse("replay", parser.parse_args(["replay", "--set", "ranks=four"]))
    with pytest.raises(SystemExit, match=r"natural_granularity=cell' \(one of row, element\)"):
        parse("characterize", parser.parse_args(["characterize", "r", "--set", "natural_granularity=cell"]))
    got = parse("replay", parser.parse_args(["replay", "--set", "tensor=none", "--set", "schemes=zen,sparcml"]))
    assert got["tensor"] is None and got["schemes"] == ["zen", "sparcml"]


def test_runs_lists_deletes_and_prunes_but_keeps_reproduce_runs(capsys):
    _fake_run("smoke-a", finished=True)
    _fake_run("smoke-b", finished=False, trace_bytes=5000)
    _fake_run("reproduce-x", finished=True)
    main(["runs"])
    out = capsys.readouterr().out
    assert "smoke-a" in out and "smoke-b" in out and "reproduce-x" in out and "2 x 2" in out
    row_b = next(line for line in out.splitlines() if line.startswith("smoke-b"))
    assert " no " in row_b
    main(["runs", "--delete", "smoke-a"])
    assert not paths.run_dir("smoke-a").exists() and not paths.trace_dir("smoke-a").exists()
    main(["runs", "--prune"])
    assert not paths.trace_dir("smoke-b").exists() and paths.trace_dir("reproduce-x").exists()
    with pytest.raises(SystemExit, match="no run 'smoke-a'"):
        main(["runs", "--delete", "smoke-a"])
    main(["runs", "--delete", "reproduce-x"])  # named: deleted
    assert not paths.run_dir("reproduce-x").exists()


def test_reproduce_names_its_stages():
    from zen_experiments.reproduce import STAGES

    assert list(STAGES) == ["train", "characterize", "schemes", "netlab", "zen", "paper", "edit", "scale"]
    with pytest.raises(SystemExit, match="unknown stages \\['tran'\\]; the stages are train, characterize"):
        main(["reproduce", "--only", "tran"])
    with pytest.raises(SystemExit, match="not captured yet: run the train stage first"):
        main(["reproduce", "--only", "characterize", "--skip", "train"])


@pytest.mark.parametrize(
    "argv, ran",
    [
        ([], ["train", "characterize", "schemes", "netlab", "zen", "paper"]),
        (["--full"], ["train", "characterize", "schemes", "netlab", "zen", "paper", "edit", "scale"]),
        (["--only", "edit"], ["edit"]),
        (["--full", "--skip", "netlab"], ["train", "characterize", "schemes", "zen", "paper", "edit", "scale"]),
        (["--only", "scale,zen"], ["zen", "scale"]),
    ],
)
def test_make_reproduce_leaves_edit_and_scale_to_full(monkeypatch, capsys, argv, ran):
    from zen_experiments import reproduce

    calls = []
    monkeypatch.setattr(
        reproduce, "STAGES", {name: (lambda o, name=name: calls.append(name)) for name in reproduce.STAGES}
    )
    main(["reproduce", *argv])
    assert calls == ran
    assert ("not running edit, scale" in capsys.readouterr().out) == ("edit" not in ran and "--only" not in argv)


def test_set_reaches_the_stages_that_train_and_only_those():
    import inspect

    from zen_experiments.reproduce import STAGES

    takes = [name for name, stage in STAGES.items() if inspect.signature(stage).parameters]
    assert takes == ["train", "zen", "edit", "scale"]


def test_benchmark_names_have_one_source(monkeypatch, capsys):
    """The registry: the CLI's help and checks, and make bench (no list of its own) derive from it; the notebooks
    take make reproduce's run ids from reproduce_run_ids, not copies."""
    from pathlib import Path

    from zen_experiments import benchmarks

    parser = build_parser()
    text = next(a for a in parser._actions if a.dest == "command").choices["bench"].format_help()
    flat = " ".join(text.split()).replace("- ", "-")  # argparse wraps at hyphens: fsdp-balance may end a line
    assert all(f"{name}:" in flat for name in benchmarks.BENCHMARKS)
    with pytest.raises(SystemExit, match="unknown benchmark nope; the benchmarks are capture, characterize"):
        main(["bench", "nope"])
    ran = []
    monkeypatch.setattr(benchmarks, "run", lambda name, overrides=(): ran.append(name))
    main(["bench"])
    assert ran == benchmarks.default_benchmarks() and "train" not in ran and "capture" in ran
    root = Path(__file__).parents[2]
    make_bench = (root / "Makefile").read_text().split("\nbench: venv\n", 1)[1].split("\n\n", 1)[0]
    assert make_bench.strip() == "$(PY) -m zen_analysis bench"
    for nb in sorted((root / "notebooks").glob("*.ipynb")):
        assert '\\"reproduce-' not in nb.read_text(), f"{nb.name} spells out a reproduce run id"


@pytest.mark.parametrize("old", ["measure", "bench-comm"])
def test_the_old_names_of_replay_still_work_with_one_line_of_notice(capsys, old):
    """The verb is named as its module (evaluation/replay.py); its two earlier names run it, saying so once."""
    parser = build_parser()
    assert parser.parse_args([old, "--synthetic"]).func is parser.parse_args(["replay", "--synthetic"]).func
    with pytest.raises(SystemExit, match="replay needs a run id"):
        main([old])
    assert capsys.readouterr().err.count(f"`zen-analysis {old}` is now `zen-analysis replay`") == 1


def test_a_missing_trace_shard_stops_the_analysis_unless_allowed_and_then_it_is_named(capsys):
    """Issue 41: with a shard deleted, `traces` and `characterize` used to exit 0 on 19 of 20 shards, the table
    still saying every step and worker."""
    from tests.unit.test_traces import captured_run

    tdir = captured_run("cli-missing")
    main(["traces", "cli-missing"])
    assert "4 of 4 shards" in capsys.readouterr().out
    (tdir / "rank001-shard00000.parquet").unlink()  # workers 2-3 at steps 0-1
    for command in ("traces", "characterize", "evaluate"):
        with pytest.raises(SystemExit) as err:
            main([command, "cli-missing"])
        msg = str(err.value.code)
        assert "rank001-shard00000.parquet: missing (rank 1: workers 2-3 at steps 0-1)" in msg
        assert "--allow-missing" in msg and "delete" not in msg
    capsys.readouterr()
    main(["traces", "cli-missing", "--allow-missing"])
    out = capsys.readouterr().out
    assert "3 of 4 shards" in out
    assert "INCOMPLETE (incomplete traces: 1 of 4 shards missing, so no records of workers 2-3 at steps 0-1" in out
    header, *rows = out.splitlines()[-3:]
    assert "records_missing" in header and all(row.split()[-1] == "4" for row in rows)  # 2 workers x 2 steps
    main(["characterize", "cli-missing", "--allow-missing"])
    assert "INCOMPLETE (incomplete traces: 1 of 4 shards missing" in capsys.readouterr().out
    main(["evaluate", "cli-missing", "--allow-missing", "--set", "topologies=paper-tcp25"])
    out = capsys.readouterr().out
    assert out.count("workers 2-3 at steps 0-1") == 2  # under the table and under the crossover lines


# ---- names a user reads and types back (issue 41, finding 11)


def test_a_subcommand_or_choice_typo_gets_a_did_you_mean(capsys):
    for argv, suggestion in [
        (["trian", "smoke"], "did you mean 'train'?"),
        (["runz"], "did you mean 'runs'?"),
    ]:
        with pytest.raises(SystemExit):
            main(argv)
        assert suggestion in capsys.readouterr().err
    with pytest.raises(SystemExit, match="did you mean 'row'?"):
        main(["characterize", "x", "--set", "natural_granularity=rows"])
    with pytest.raises(SystemExit, match="did you mean 'lstm-smoke'"):
        main(["config", "lstm_smoke"])


def test_recipe_descriptions_name_recipes_as_the_cli_takes_them():
    import re

    from zen_analysis import recipes

    functions = {fn.__name__ for fn in recipes.RECIPES.values()}
    for name, fn in recipes.RECIPES.items():
        for quoted in re.findall(r"``([\w-]+)``", fn.__doc__):
            if quoted in functions or quoted.replace("_", "-") in recipes.RECIPES:
                assert quoted in recipes.RECIPES, f"{name}'s description names {quoted!r}, which is no recipe"


def test_every_recipe_runs_shows_resolves_in_config(capsys):
    _fake_run("smoke-listed", finished=True)
    _fake_run("parity-listed", finished=True)
    stored = paths.run_dir("parity-listed") / "config.json"
    cfg = json.loads(stored.read_text())
    stored.write_text(json.dumps({**cfg, "name": "default-parity"}))
    capsys.readouterr()
    main(["runs"])
    out = capsys.readouterr().out
    shown = {line.split()[0]: line.split()[1] for line in out.splitlines() if line.startswith(("smoke-", "parity-"))}
    assert shown["smoke-listed"] == "smoke" and shown["parity-listed"] == "default-parity*"
    assert "'*': a name, not a recipe" in out and f"{paths.runs_dir()}/<run id>/config.json" in out
    for name in shown.values():
        if not name.endswith("*"):
            main(["config", name])
    capsys.readouterr()
    main(["config", str(stored)])  # what the footer says the starred run's config is
    assert json.loads(capsys.readouterr().out)["name"] == "default-parity"
    main(["runs", "--delete", "smoke-listed", "parity-listed"])


def test_the_benchmark_registry_is_data_that_resolves_and_the_cli_parses_without_importing_a_benchmark():
    """Every registry entry names a function that exists; building the parser and listing the benchmarks imports
    neither a benchmark module nor torch (checked in a fresh interpreter)."""
    import subprocess
    import sys

    from zen_experiments import benchmarks

    for name in benchmarks.BENCHMARKS:
        assert callable(benchmarks.resolve(name)), name
    code = (
        "import sys\n"
        "from zen_analysis.interface.cli import build_parser\n"
        "build_parser().parse_args(['bench', 'zen'])\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('zen_experiments.bench_') or m == 'torch')\n"
        "print(loaded)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out
