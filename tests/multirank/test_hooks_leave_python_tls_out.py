"""Every collective the toolkit's hooks issue during backward is issued without backward's thread-local Python
object (``zen_analysis.wire.inflight.no_python_tls``), so no gloo work of theirs needs the GIL when gloo's thread
destroys it, which aborts a process whose interpreter is exiting: DDP's natural hook (dense and ``sparse=True``
tables), its top-k hook, and Zen's reduce-scatter under FSDP2 (``shard``)."""

import torch
import torch.distributed as dist
from torch import nn

from zen_analysis.ranks.procs import fork_launch

COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "all_to_all",
    "all_to_all_single",
    "reduce_scatter_tensor",
    "broadcast",
    "isend",
    "irecv",
    "batch_isend_irecv",
)


def _spy(calls: list) -> None:
    """Each collective called through ``torch.distributed`` records (in a backward, with backward's object)."""
    for name in COLLECTIVES:
        fn = getattr(dist, name)
        fn = getattr(fn, "_spied", fn)  # the unspied one, when a previous case put a spy on

        def spy(*args, _fn=fn, **kwargs):
            in_backward = torch._C._current_graph_task_id() != -1
            calls.append((in_backward, in_backward and torch._C._is_key_in_tls("context")))
            return _fn(*args, **kwargs)

        spy._spied = fn
        setattr(dist, name, spy)


def _train(rank, world, case):
    from torch.nn.parallel import DistributedDataParallel as DDP

    from zen_analysis.sync.ddp import register

    torch.manual_seed(0)
    calls: list = []
    embed = nn.Embedding(300, 8, sparse=case == "natural-sparse")
    net = nn.Sequential(embed, nn.Linear(8, 300))
    if case == "fsdp":
        from torch.distributed.device_mesh import init_device_mesh

        from zen_analysis.fsdp import shard

        shard(net, mesh=init_device_mesh("cpu", (world,)))
        model = net
    else:
        model = DDP(net)
        register(model, mode="topk" if case == "topk" else "natural")
    _spy(calls)
    for step in range(2):
        x = torch.randint(0, 300, (4, 6), generator=torch.Generator().manual_seed(10 * step + rank))
        nn.functional.cross_entropy(model(x[:, :-1]).reshape(-1, 300), x[:, 1:].reshape(-1)).backward()
        model.zero_grad()
    return calls


CASES = ("natural-dense", "natural-sparse", "topk", "fsdp")


def _cases(rank, world):
    out = {}
    for case in CASES:  # one launch for all (a spy left on from a case only records more)
        out[case] = _train(rank, world, case)
        dist.barrier()
    return out


def test_collectives_issued_in_backward_by_the_toolkit_carry_no_python_object():
    for by_case in fork_launch(_cases, 2):
        for case, calls in by_case.items():
            in_backward = [has for inside, has in calls if inside]
            assert in_backward, f"{case}: no collective was issued during backward ({len(calls)} in all)"
            assert not any(in_backward), f"{case}: {sum(in_backward)} of {len(in_backward)} carried backward's object"
