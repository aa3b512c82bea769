"""``train``: steps, batches, optimizer and evaluation."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(kw_only=True)
class TrainConfig:
    num_steps: int = 60
    seq_len: int = 128
    batch_per_worker: int = 4
    """Sequences per worker micro-batch (the per-GPU batch of the simulated worker)."""
    workers_per_rank: int = 8
    """Virtual workers V per rank: each is one micro-batch whose gradient is captured separately."""
    lr: float = 3e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 5
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    """Global-norm clipping of the synchronised gradient; 0 turns it off."""
    allow_nonfinite_loss: bool = False
    """Train on when a step's loss is NaN or infinite. By default the run stops at that step with an error naming
    it (every rank at the same step: the loss is the mean over ranks; under local SGD the rank that sees it), so a
    diverged run never ends as a success with a NaN loss."""
    embedding_update: str = "dense"
    """How the optimizer steps the input embedding: ``dense`` (AdamW over every row, as the rest of the model) or
    ``lazy``, which is not AdamW's dense update and changes the numbers: rows no batch touched this step keep their
    weights and moments, with no weight decay and no momentum step (rows whose summed gradient is zero skip the step;
    ``torch.optim.SparseAdam``'s and LazyAdam's semantics, ``zen_analysis.train.optim``). ``lazy`` clips by the
    embedding's non-zero rows too, and applies the same way whatever the sync, so dense vs sparse schemes stay a
    same-optimizer comparison."""
    save_params: bool = False
    """Rank 0 writes the final parameters to ``<run_dir>/params.pt`` (for parity checks between schemes)."""
    checkpoint_every: int = 200
    """Write a checkpoint after every this many steps (``data/runs/<run_id>/checkpoints/``; ``zen_analysis.train.
    checkpoint``), to resume the run from (``--resume``); 0: none. 200 serves long runs and costs nothing on the
    recipes and ``make reproduce`` (none of their runs reaches 200 steps); on the default recipe one checkpoint
    costs a fraction of a step. Runs that checkpoints do not cover (A-EDiT) train
    without, saying why."""
    keep_checkpoints: int = 2
    """How many of the newest checkpoints are kept."""
    export: bool = False
    """Rank 0 writes the trained model to ``<run_dir>/export/`` for other programs: the LLM families with
    ``save_pretrained`` and the run's tokenizer (``AutoModelForCausalLM.from_pretrained`` loads them), the LSTM and
    DeepFM as a state dict (:func:`zen_analysis.workload.export.load_exported`)."""
    seed: int = 1234
    eval_every: int = 0
    """Validation loss every this many steps (and at the end); 0: only at the end."""
    eval_batches: int = 4

    def __post_init__(self) -> None:
        for name in ("num_steps", "seq_len", "batch_per_worker", "workers_per_rank"):
            if getattr(self, name) < 1:
                raise ValueError(f"train.{name} must be >= 1")
        if self.embedding_update not in ("dense", "lazy"):
            raise ValueError(f"train.embedding_update must be 'dense' or 'lazy', got {self.embedding_update!r}")
        if self.lr <= 0:
            raise ValueError("train.lr must be positive")
        if self.checkpoint_every < 0 or self.keep_checkpoints < 1:
            raise ValueError("train.checkpoint_every must be >= 0 (0: none) and train.keep_checkpoints >= 1")
