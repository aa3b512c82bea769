"""DGC-style top-k gradient sparsification with error feedback (compression sparsity).

Context: Deep Gradient Compression (Lin et al., ICLR'18) keeps the largest ``ratio`` fraction of each gradient
by magnitude and accumulates the rest locally (error feedback), adding it to the next gradient. The Zen paper
keeps the top 5% (its Table 2 workloads). For large tensors DGC estimates the threshold from a random sample
(about 1% of the elements) instead of an exact top-k, then re-selects exactly among the candidates when the
sample overshoots; small tensors use an exact ``torch.topk``. The selection count is therefore close to, not
exactly, ``ratio * numel`` on large tensors, as in DGC.

Zeros are never selected: a worker whose accumulated gradient is zero sends nothing.

Shape suffixes: N elements of the flattened gradient (plus its residual), K entries kept, S magnitudes sampled for the
threshold, P the samples the threshold is taken over (every rank's, when gathered).
"""

from __future__ import annotations

import zlib

import torch


class TopKCompressor:
    """Selects top-k (indices, values) of flattened tensors, keeping one residual per (worker, tensor)."""

    def __init__(self, *, ratio: float, exact_below: int, sample_ratio: float, error_feedback: bool, seed: int) -> None:
        self.ratio = ratio
        self.exact_below = exact_below
        self.sample_ratio = sample_ratio
        self.error_feedback = error_feedback
        self.seed = seed
        self._residuals: dict[tuple[int, str], torch.Tensor] = {}

    def select(self, acc_N: torch.Tensor, *, generator: torch.Generator | None = None, gather=None) -> torch.Tensor:
        """Indices (int64, sorted) of about ``ratio * N`` largest-magnitude non-zero entries of ``acc_N``.

        ``gather`` makes the threshold global, as the Zen paper does for DGC: it maps this worker's sample of
        magnitudes (all of them below ``exact_below`` elements) to every worker's samples concatenated (e.g. an
        all-gather), the threshold is the top ``ratio`` of that pool, and each worker keeps its entries above it
        (uncapped: the paper applies the global threshold locally): a worker with larger gradients sends more."""
        numel = acc_N.numel()
        k = max(1, int(numel * self.ratio))
        mag_N = acc_N.abs()
        if gather is not None:
            exact = numel < self.exact_below
            sample_S = mag_N if exact else mag_N[self._sample_positions(numel, k, generator, acc_N.device)]
            pool_P = gather(sample_S.contiguous())
            threshold = torch.topk(pool_P, max(1, int(pool_P.numel() * self.ratio)), sorted=False).values.min()
            idx_K = torch.nonzero(mag_N >= threshold, as_tuple=True)[0]  # no per-worker cap: the budget is global
        elif numel < self.exact_below or k * 2 > numel:
            idx_K = torch.topk(mag_N, k, sorted=False).indices
        else:
            sample_S = mag_N[self._sample_positions(numel, k, generator, acc_N.device)]
            threshold = torch.topk(sample_S, max(1, int(sample_S.numel() * self.ratio)), sorted=False).values.min()
            idx_K = torch.nonzero(mag_N >= threshold, as_tuple=True)[0]
            if idx_K.numel() > k * 13 // 10:  # DGC: too many candidates, select exactly among them
                idx_K = idx_K[torch.topk(mag_N[idx_K], k, sorted=False).indices]
        idx_K = idx_K[acc_N[idx_K] != 0]
        return idx_K.sort().values

    def _sample_positions(self, numel: int, k: int, generator, device) -> torch.Tensor:
        num_samples = max(k, int(numel * self.sample_ratio), 1024)
        return torch.randint(0, numel, (num_samples,), generator=generator, device=device)

    def generator(self, *, worker: int, tensor: str, step: int, device: torch.device | str = "cpu") -> torch.Generator:
        """The sampling generator of (worker, tensor, step): identical across runs and processes."""
        gen = torch.Generator(device=device)
        # str hashes are salted per process; crc32 keeps the sample identical across runs
        gen.manual_seed((self.seed * 1_000_003 + step * 10_007 + worker) * 2**20 + zlib.crc32(tensor.encode()) % 2**20)
        return gen

    def accumulate(self, grad: torch.Tensor, *, worker: int, tensor: str) -> torch.Tensor:
        """``grad`` flattened to float32 plus the residual ``worker`` holds for ``tensor`` (a new tensor)."""
        grad_N = grad.detach().reshape(-1).float()
        key = (worker, tensor)
        return grad_N + self._residuals[key] if self.error_feedback and key in self._residuals else grad_N.clone()

    def sample(self, acc_N: torch.Tensor, *, worker: int, tensor: str, step: int) -> torch.Tensor:
        """The magnitudes of ``acc_N`` that :meth:`select` would hand to ``gather`` (a global threshold's share)."""
        numel = acc_N.numel()
        if numel < self.exact_below:
            return acc_N.abs()
        gen = self.generator(worker=worker, tensor=tensor, step=step, device=acc_N.device)
        return acc_N.abs()[self._sample_positions(numel, max(1, int(numel * self.ratio)), gen, acc_N.device)]

    def keep(self, acc_N: torch.Tensor, idx_K: torch.Tensor, *, worker: int, tensor: str) -> torch.Tensor:
        """The values sent at ``idx_K``; the rest of ``acc_N`` (modified in place) becomes the residual."""
        val_K = acc_N[idx_K].clone()
        if self.error_feedback:
            acc_N[idx_K] = 0
            self._residuals[(worker, tensor)] = acc_N
        return val_K

    def compress(
        self, grad: torch.Tensor, *, worker: int, tensor: str, step: int, gather=None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(indices_K, values_K) sent by ``worker`` for ``grad``; the unsent remainder becomes its residual.
        ``gather``: as in :meth:`select` (a global threshold)."""
        acc_N = self.accumulate(grad, worker=worker, tensor=tensor)
        gen = self.generator(worker=worker, tensor=tensor, step=step, device=acc_N.device)
        idx_K = self.select(acc_N, generator=gen, gather=gather)
        return idx_K, self.keep(acc_N, idx_K, worker=worker, tensor=tensor)
