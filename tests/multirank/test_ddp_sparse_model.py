"""Stock DDP's sparse path on real gloo ranks: the bytes each rank writes to its sockets are what
``wire.traffic.ddp_sparse`` models (gloo's 48-byte message headers aside, measured from a barrier), for a plain
``dist.all_reduce`` of a sparse COO tensor and for DDP's own backward of an ``nn.Embedding(sparse=True)``."""

from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from zen_analysis.pricing.traffic import ddp_sparse
from zen_analysis.ranks.procs import fork_launch

pytestmark = pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs Linux's /proc/self/io")
NUM_ROWS = 5000


def _written() -> tuple[int, int]:
    """(bytes, write calls) this process has passed to write-like system calls so far (gloo's sockets included)."""
    fields = dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())
    return int(fields["wchar"]), int(fields["syscw"])


def _delta(fn) -> tuple[int, int]:
    b0, c0 = _written()
    fn()
    b1, c1 = _written()
    return b1 - b0, c1 - c0


def _header_bytes() -> int:
    """Bytes gloo writes per message beyond its payload: a barrier moves no payload, only headers."""
    nbytes, calls = _delta(dist.barrier)
    assert calls > 0 and nbytes % calls == 0
    return nbytes // calls


def _rows(rank: int, case: int) -> torch.Tensor:
    """Token ids of one rank: repeated ids (an embedding's uncoalesced gradient), some ranks with none."""
    gen = torch.Generator().manual_seed(100 * case + rank)
    if (rank + case) % 5 == 4:
        return torch.empty(0, dtype=torch.long)
    return torch.randint(0, NUM_ROWS // (1 + rank), (50 + 37 * rank * (case + 1),), generator=gen)


def _all_reduce_body(rank, world, cases):
    out = []
    for case, (width, dtype) in enumerate(cases):
        ids = _rows(rank, case)
        values = torch.randint(-3, 4, (ids.numel(), width)).to(dtype)
        grad = torch.sparse_coo_tensor(ids[None], values, (NUM_ROWS, width))
        dense = grad.to_dense()
        dist.all_reduce(dense)
        dist.barrier()
        header = _header_bytes()
        sent, calls = _delta(lambda g=grad: dist.all_reduce(g))
        out.append((case, sent - header * calls, torch.equal(grad.to_dense(), dense)))
    return out


@pytest.mark.smoke
def test_a_sparse_all_reduce_writes_the_modelled_bytes():
    cases = [(16, torch.float32), (3, torch.bfloat16), (1, torch.float64)]  # fp16: torch has no CPU sparse add
    for world in (2, 3, 4):
        results = fork_launch(_all_reduce_body, world, cases)
        for case, (width, dtype) in enumerate(cases):
            rows = [torch.unique(_rows(r, case)).numel() for r in range(world)]  # gloo coalesces first
            model = ddp_sparse(rows, width, value_bytes=torch.finfo(dtype).bits // 8).sent()
            for rank in range(world):
                got_case, payload, exact = results[rank][case]
                assert got_case == case and exact, f"{world} ranks, case {case}: the sum differs from a dense one"
                assert payload == model[rank], (world, case, rank)


def _ddp_body(rank, world, width):
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Embedding(NUM_ROWS, width, sparse=True))
    ids = _rows(rank, 0)
    if ids.numel() == 0:
        ids = torch.tensor([rank])
    for _ in range(2):  # DDP's first iterations rebuild buckets
        model.zero_grad()
        model(ids).sum().backward()
    model.zero_grad()
    loss = model(ids).sum()
    dist.barrier()
    header = _header_bytes()
    sent, calls = _delta(loss.backward)
    return torch.unique(ids).numel(), sent - header * calls


def test_stock_ddp_backward_of_a_sparse_embedding_is_that_path():
    results = fork_launch(_ddp_body, 3, 8)
    rows = [r for r, _ in results]
    model = ddp_sparse(rows, 8).sent()
    assert [sent for _, sent in results] == model.tolist()
