import json
import subprocess
import sys


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "zen_analysis", *args], capture_output=True, text=True, timeout=120)


def test_config_prints_the_recipe_with_overrides():
    out = _cli("config", "smoke", "--set", "train.num_steps=3", "--set", "dist.num_ranks=4")
    assert out.returncode == 0, out.stderr
    cfg = json.loads(out.stdout)
    assert cfg["train"]["num_steps"] == 3 and cfg["dist"]["num_ranks"] == 4 and cfg["name"] == "smoke"


def test_bad_override_is_one_clear_line_not_a_traceback():
    out = _cli("config", "smoke", "--set", "train.bogus=1")
    assert out.returncode != 0
    assert "zen-analysis: error: unknown config key 'train.bogus'" in out.stderr
    assert "Traceback" not in out.stderr


def test_unknown_run_is_a_clear_error():
    out = _cli("traces", "no-such-run")
    assert out.returncode != 0 and "no trace directory for run 'no-such-run'" in out.stderr
    assert "Traceback" not in out.stderr


def test_recipes_lists_every_recipe():
    out = _cli("recipes")
    assert out.returncode == 0
    for name in ("default", "smoke", "lstm", "gpt2", "llama-32k", "workers128"):
        assert name in out.stdout
