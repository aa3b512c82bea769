"""What `make test-fast` (``pytest -m "not slow" tests``) runs: every test outside the folders below, and in them
only the tests marked ``smoke`` (one cheap representative per multi-rank family).

Every test under ``tests/multirank``, ``tests/gpu`` and ``tests/browser`` is marked ``slow`` here unless it carries
``@pytest.mark.smoke`` (or ``pytest.param(..., marks=pytest.mark.smoke)`` for one case of a parametrized test), so
a new multi-rank test is slow by default and nobody has to remember a marker. ``make test`` selects no markers and
runs them all. ``tests/unit/test_fast_suite.py`` checks the selection in a subprocess."""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).parent
SLOW_FOLDERS = ("multirank", "gpu", "browser")

_COLLECTED = pytest.StashKey[tuple]()


def _in_slow_folder(item: pytest.Item) -> bool:
    try:
        rel = Path(item.path).resolve().relative_to(TESTS.resolve())
    except ValueError:  # a notebook under nbmake, or anything outside tests/
        return False
    return len(rel.parts) > 1 and rel.parts[0] in SLOW_FOLDERS


@pytest.hookimpl(tryfirst=True)  # before pytest's own hook deselects by -m, so the marks added here count
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    config.stash[_COLLECTED] = tuple(items)
    for item in items:
        if _in_slow_folder(item) and item.get_closest_marker("smoke") is None:
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def collected_items(request: pytest.FixtureRequest) -> tuple[pytest.Item, ...]:
    """Every test collected, before ``-m`` or ``-k`` deselected any (``request.session.items`` is what is left)."""
    return request.config.stash.get(_COLLECTED, tuple(request.session.items))


def _tiny_checkpoint(folder, kind: str):
    """A small checkpoint written by ``save_pretrained`` with its fast tokenizer (a BPE trained on a little of the
    stdlib): ``bert`` an encoder saved as ``BertModel`` (as all-MiniLM-L6-v2 is), ``gpt2`` a causal LM; both tie."""
    import sysconfig

    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    texts = [(stdlib / f"{name}.py").read_text() for name in ("argparse", "textwrap", "csv")]
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] if kind == "bert" else ["<|endoftext|>"]
    tok = Tokenizer(models.BPE(unk_token="[UNK]" if kind == "bert" else None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=600, special_tokens=specials, show_progress=False))
    if kind == "bert":
        fast = transformers.PreTrainedTokenizerFast(
            tokenizer_object=tok,
            unk_token="[UNK]",
            pad_token="[PAD]",
            cls_token="[CLS]",
            sep_token="[SEP]",
            mask_token="[MASK]",
        )
        config = transformers.BertConfig(
            vocab_size=len(fast),
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=128,
        )
        config.architectures = ["BertModel"]
        model = transformers.BertModel(config)
    else:
        fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>")
        eos = fast.eos_token_id
        config = transformers.GPT2Config(
            vocab_size=len(fast), n_embd=32, n_layer=2, n_head=2, n_positions=128, bos_token_id=eos, eos_token_id=eos
        )
        config.architectures = ["GPT2LMHeadModel"]
        model = transformers.GPT2LMHeadModel(config)
    model.save_pretrained(folder)
    fast.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    """``tiny_checkpoint("bert" | "gpt2")``: the folder of a small pretrained checkpoint (:func:`_tiny_checkpoint`),
    written once per session."""
    made = {}

    def get(kind: str) -> str:
        if kind not in made:
            made[kind] = str(_tiny_checkpoint(tmp_path_factory.mktemp(f"pretrained-{kind}"), kind))
        return made[kind]

    return get


def _write_lstm_smoke_trace(rid: str, worker_rows: list) -> str:
    """A one-step captured run ``rid`` of lstm-words-smoke's table and config (4096 x 64, 64 tokens a sequence) on
    one rank, worker ``w`` touching the rows ``worker_rows[w]`` (a tensor of row ids each): what the paper-scale
    table prices. Returns ``rid``."""
    import torch

    from zen_analysis import paths, recipes
    from zen_analysis.capture.traces import SparseGrad, TraceWriter, write_manifest

    R, D = 4096, 64  # lstm-words-smoke's table
    wr = TraceWriter(paths.trace_dir(rid), rank=0, run_id=rid, world_size=1, steps_per_shard=1)
    for w, rows in enumerate(worker_rows):
        idx = (rows[:, None] * D + torch.arange(D)).reshape(-1)
        wr.add(SparseGrad(0, w, 0, "embed.weight", "natural", (R, D), idx, torch.ones(idx.numel())))
    wr.end_step()
    wr.close()
    tensors = {"embed.weight": {"kind": "natural", "shape": [R, D], "numel": R * D}}
    write_manifest(
        paths.trace_dir(rid), {"run_id": rid, "tensors": tensors, "config": recipes.lstm_words_smoke().to_dict()}
    )
    return rid


@pytest.fixture(scope="session")
def lstm_smoke_trace():
    """``lstm_smoke_trace(run_id, worker_rows)``: writes a tiny natural LSTM trace (:func:`_write_lstm_smoke_trace`)
    and returns its run id."""
    return _write_lstm_smoke_trace


_REGISTRY = "zen_analysis.comm.schemes.registration"


def _schemes_now() -> dict | None:
    """The scheme registry's ``name -> class`` as it stands, or ``None`` where nothing has imported it yet (a test
    that never touches torch does not pay for its import here)."""
    import sys

    module = sys.modules.get(_REGISTRY)
    return None if module is None else dict(module.SCHEMES)


@pytest.fixture(autouse=True)
def _schemes_left_as_found():
    """Every test leaves :data:`~zen_analysis.comm.schemes.SCHEMES` as it found it: a scheme a test registers (a
    docs block, a plug-in test) and does not unregister would otherwise sit among the built-ins of every later test
    of the process (the planner's candidates, the crossover, the paper-scale rows), and those tests would fail far
    from the cause. A leak is undone here and fails the test that left it, naming the schemes. Where the registry was
    first imported during the test, it is checked against what an import gives: the built-ins and the installed
    entry points."""
    before = _schemes_now()
    yield
    after = _schemes_now()
    if after is None:
        return
    from zen_analysis.comm.schemes import BUILTIN_SCHEMES, register_scheme, unregister_scheme
    from zen_analysis.config.plugins import entry_point_names

    if before is None:
        added = set(after) - set(BUILTIN_SCHEMES) - set(entry_point_names())
        changed = sorted(added)
        for name in changed:
            unregister_scheme(name)
    else:
        changed = sorted(n for n in set(before) | set(after) if before.get(n) is not after.get(n))
        for name in changed:
            if name in before:
                register_scheme(before[name], replace=True)
            else:
                unregister_scheme(name)
    if changed:
        pytest.fail(f"the test left the scheme registry changed ({', '.join(changed)}): unregister_scheme them after")
