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
