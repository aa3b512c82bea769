"""How each scheme of the Zen paper's evaluation sums a gradient on its cluster, as traffic and seconds: 16 machines
of 8 V100 on NVLink, one network link per machine (section 5.1; digest sections 4.7-4.8).

Natural workloads (pure data parallelism, a rank per GPU, the embedding's gradient summed). The paper's
implementations sum a flattened gradient by elements (an index and a value per non-zero element in COO: the digest's
two words per non-zero, section 3.4); a row of the embedding is D elements alike, so each sum is modelled on the rows
as one element each and its bytes taken D times (:meth:`~zen_analysis.pricing.traffic.Traffic.scaled`: payload x D,
counts and calls as they are), which is the element-level traffic but for how the D elements of a row hash. Each
scheme as its published implementation treats the node (:data:`HIERARCHY`):

* ``allreduce`` (NCCL / Horovod ring), ``flat``: one ring through all 8 m GPUs, placed node by node, so it crosses
  each node's link once and has it to itself: 2 (n - 1) steps of alpha + ceil(M / n) x 4 bytes over the slowest link
  of the ring, the network's (:func:`~zen_analysis.pricing.cost.phase_times`' ring formula). Horovod's hierarchical
  all-reduce (reduce-scatter in the node, 8 rings across, all-gather) moves 2 (m - 1) / m where this moves
  2 (n - 1) / n of the table over each link: 6% less at 16 machines.
* ``agsparse`` (PyTorch DDP's sparse all-gather), ``flat``: every GPU's rows all-gathered around one ring of all
  8 m GPUs, as DDP does an ``nn.Embedding(sparse=True)`` gradient (:func:`~zen_analysis.pricing.traffic.ddp_sparse`:
  an int64 row index and D values per row, gloo's ring ``allgatherv``): no sum inside the node, each node's link
  carries every GPU's block once. (The toolkit's own ``agsparse`` sends every block to every GPU, 8 times over a
  node's link: not what DDP does.)
* ``omnireduce`` and ``sparse_ps``, ``node``: one worker per machine (OmniReduce's Horovod integration requires one
  GPU per host; Parallax, the sparse PS, aggregates a machine's sparse gradients locally before its push): the node's
  sum by NCCL over NVLink (a reduce to the GPU at the network card and a broadcast back, each a pipelined ring moving
  the whole table: 2 (M x 4 bytes / NVLink + (g - 1) alpha)), then the scheme across the m machines with the node's
  link, on the union of the node's rows; OmniReduce in 256-element blocks of the flattened table (its block size;
  a row of 512 is two blocks, 17-wide rows share blocks), modelled on the blocks themselves.
* ``zen``, ``bp_coo`` (Zen with a COO pull, Fig. 17b) and ``sparcml`` (SSAR_Recursive_double), ``local_rank``: the
  paper's framework (section 4.7-4.8: dense tensors inside a machine by ReduceScatter / AllGather over NVLink, "the
  sparse scheme ... only for cross-machine communication"): a dense ring reduce-scatter of the table inside the node
  (contiguous chunks, as :func:`~zen_analysis.zen.sparse_allreduce.zen_sum_hierarchical` does), 8 groups of the m
  GPUs of one local rank summing their chunk across the machines at once, a dense ring all-gather inside the node:
  2 (g - 1) (alpha + ceil(M / g) x 4 bytes / NVLink). The 8 groups share the node's link: their bytes are summed per
  node and phase (:func:`~zen_analysis.pricing.traffic.concurrent`), so the hot first chunk (the skew of a
  frequency-sorted table) takes the link the others leave. SparCML's own library runs recursive doubling over all
  ranks (MPI, ``flat``): there its four stages across machines carry the node's union 8 times over a node's link,
  once per GPU (``paper_figures(hierarchy={"sparcml": "flat"})`` prices it).

LLMs (DGC top-5% of every gradient element; TP = 8 inside a node, section 5.1): data parallelism across machines
only, ``dp``: each of a node's 8 TP shards (1/8 of the parameters, what the generator's sets stand for: its
``scale`` is the shard's elements over those generated) is summed by its own data-parallel group, the m ranks of
that TP rank, one per node; the 8 groups run at once and share the node's link. The groups are statistically alike,
so one group's sets stand for all: its traffic times ``scale`` x 8 is what every node's link carries (calls stay one
group's: the groups run at once; :func:`topk_syncs`). Every scheme runs in the DP group by elements, as in ``flat``
(AGsparse's ring all-gather with int64 indices, SparCML's doubling, OmniReduce's blocks, Zen's hashing).

No scheme's local work (hashing, packing, summing) is priced: the paper's are GPU kernels beside the network (Fig. 16:
a few ms). The toolkit's agreement check is left out: the paper's implementations have none.

Shape suffixes: K rows of one GPU's set, G GPUs (one row set each), N DP ranks (one a machine, one top-k set each), C
cuts between a reduce-scatter's chunks (one more than the chunks).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch

from zen_analysis.comm.schemes import build_scheme
from zen_analysis.pricing.cost import phase_times
from zen_analysis.pricing.topology import Topology
from zen_analysis.pricing.traffic import Traffic, concurrent, ddp_sparse
from zen_analysis.sparsity.metrics import union_of
from zen_analysis.wire.exchange import ring_chunk_sizes

HIERARCHY = {
    "allreduce": "flat",
    "agsparse": "flat",
    "sparcml": "local_rank",
    "omnireduce": "node",
    "sparse_ps": "node",
    "zen": "local_rank",
    "bp_coo": "local_rank",
}
"""Each scheme's hierarchy for the natural workloads (the module docstring says why): ``flat``, ``node`` or
``local_rank``; the LLMs' are all ``dp``."""

HIERARCHIES = {
    "flat": "flat over all 8 GPUs of every machine",
    "node": "node's sum over NVLink, one worker per machine across, broadcast in the node",
    "local_rank": "reduce-scatter over NVLink, 8 local-rank groups across sharing the link, all-gather",
    "dp": "TP = 8 in the node; one data-parallel rank per machine, 8 shards' groups sharing its link",
}
"""What each hierarchy means, for the table's ``hierarchy`` column."""

OMNI_BLOCK = 256
"""OmniReduce's block size (elements of the flattened tensor)."""
VALUE_BYTES = 4
"""float32 gradients (the paper trained in FP32)."""


@dataclass(frozen=True)
class Sync:
    """One scheme's sum of a step's sparse tensor, ready to price: ``traffic`` among the ranks it spans (``flat``:
    every GPU; otherwise one rank per machine, the node's link each), the dense elements reduced and gathered inside
    each node first (``intra_numel``, 0 for none, by ``hierarchy``'s NCCL collectives) and whether the traffic is a
    dense ring alone (AllReduce's: what a dense-ring lever scales)."""

    scheme: str
    hierarchy: str
    traffic: Traffic
    intra_numel: int = 0
    dense_ring: bool = False


def _model(name: str, sets: list[torch.Tensor], numel: int, seed: int, *, width: int = 0) -> Traffic:
    """``name``'s traffic (:meth:`~zen_analysis.comm.schemes.base.CommScheme.model`; by elements, or by rows of
    ``width``) without the toolkit's agreement check; ``agsparse`` as PyTorch DDP's sparse all-gather of rows of
    ``width`` (:func:`~zen_analysis.pricing.traffic.ddp_sparse`; 1: elements)."""
    if name == "agsparse":
        return ddp_sparse([s.numel() for s in sets], max(width, 1))
    scheme = build_scheme(name, seed=seed)
    scheme.check_ranks = False
    return scheme.model(sets, numel, width=width)


def block_sets(row_sets: list[torch.Tensor], width: int, block: int = OMNI_BLOCK) -> list[torch.Tensor]:
    """The ``block``-element blocks of the flattened table (rows of ``width``) each set of rows touches, sorted: what
    OmniReduce sends for those rows."""
    out = []
    for rows_K in row_sets:
        first_K = rows_K * width // block
        span_K = (rows_K * width + width - 1) // block - first_K + 1
        starts = torch.repeat_interleave(first_K, span_K)
        within = torch.arange(int(span_K.sum())) - torch.repeat_interleave(torch.cumsum(span_K, 0) - span_K, span_K)
        out.append(torch.unique(starts + within))
    return out


def natural_syncs(
    sets_G: list[torch.Tensor],
    num_rows: int,
    width: int,
    schemes,
    *,
    gpus_per_node: int = 8,
    seed: int = 0,
    hierarchy: dict[str, str] | None = None,
    nodes: list[torch.Tensor] | None = None,
    scale: float = 1.0,
) -> dict[str, Sync]:
    """Each of ``schemes``' sum of an embedding's gradient whose non-zero rows the GPUs hold (``sets_G``, node by
    node, ``gpus_per_node`` each), by elements (the module docstring), in its :data:`HIERARCHY` (or ``hierarchy``'s
    choice for it). ``nodes``: each node's union of its GPUs' rows, where the caller has them already. ``scale``: the
    table's elements stand for ``scale`` times as many (a table generated smaller): bytes and dense elements x it."""
    g, D = gpus_per_node, width
    if len(sets_G) % g:
        raise ValueError(f"{len(sets_G)} GPUs do not fill nodes of {g}")
    modes = {**HIERARCHY, **(hierarchy or {})}
    if nodes is None:
        nodes = node_unions(sets_G, num_rows, g)
    spaces = {"rows": num_rows, "blocks": math.ceil(num_rows * D / OMNI_BLOCK)}
    blocks = {}  # the sets as OmniReduce's blocks, made once per hierarchy
    out = {}
    for name in schemes:
        mode = modes.get(name, "flat")  # a scheme from outside the package: over every GPU, unless hierarchy says
        if mode not in ("flat", "node", "local_rank"):
            raise ValueError(f"{name}: hierarchy must be flat, node or local_rank, got {mode!r}")
        if name == "agsparse" and mode != "flat":
            raise ValueError("agsparse is PyTorch DDP's all-gather over every GPU: flat only")
        sets = sets_G if mode == "flat" else nodes
        if name == "omnireduce":  # on its blocks, at the table's own geometry
            sets = blocks.setdefault(mode == "flat", block_sets(sets, D))
            space, by_rows, factor = "blocks", OMNI_BLOCK, 1
        else:  # agsparse: DDP's rows; the others one element per row, its bytes D times
            space, by_rows, factor = "rows", (D if name == "agsparse" else 0), (1 if name == "agsparse" else D)
        if mode == "local_rank":
            chunks = _chunks(sets, spaces[space], g)
            t = concurrent([_model(name, c, n, seed, width=by_rows) for c, n in chunks])
        else:
            t = _model(name, sets, spaces[space], seed, width=by_rows)
        t = t.scaled(factor * scale) if factor * scale != 1 else t
        intra = 0 if mode == "flat" else round(num_rows * D * scale)
        out[name] = Sync(name, mode, t, intra_numel=intra, dense_ring=name == "allreduce")
    return out


def node_unions(sets_G: list[torch.Tensor], num_rows: int, gpus_per_node: int) -> list[torch.Tensor]:
    """Each node's union of its ``gpus_per_node`` GPUs' rows (the GPUs placed node by node)."""
    g = gpus_per_node
    return [union_of(sets_G[i : i + g], num_rows) for i in range(0, len(sets_G), g)]


def _chunks(sets: list[torch.Tensor], numel: int, g: int) -> list[tuple[list[torch.Tensor], int]]:
    """The ``g`` contiguous chunks of a dense reduce-scatter over [0, numel) (:func:`ring_chunk_sizes`): each as the
    sets' indices inside it, shifted to start at 0, and its size."""
    sizes = ring_chunk_sizes(numel, g)
    cuts_C = torch.tensor([0, *torch.cumsum(torch.tensor(sizes), 0).tolist()])
    out = [([], n) for n in sizes]
    for s in sets:  # sorted: the chunks are slices
        at = torch.searchsorted(s, cuts_C).tolist()
        for c, (lo, hi) in enumerate(zip(at, at[1:])):
            out[c][0].append(s[lo:hi] - int(cuts_C[c]))
    return out


def topk_syncs(
    sets_N: list[torch.Tensor], numel: int, scale: float, schemes, *, shards: int = 8, seed: int = 0
) -> dict[str, Sync]:
    """Each of ``schemes``' sum of the DP ranks' top-k sets (``sets_N``, one rank per machine, over ``numel``
    elements) in the LLMs' ``dp`` hierarchy. ``scale``: the generated elements stand for ``scale`` times as many, one
    TP shard's gradient; ``shards``: the TP shards of a machine, each summed by its own DP group at the same time
    over the machine's one link. The groups are alike, so one group's traffic with its bytes x ``scale`` x
    ``shards`` (its calls as they are: the groups' messages are in flight together) is what the link carries."""
    if shards < 1:
        raise ValueError(f"shards must be >= 1, got {shards}")
    factor = scale * shards
    out = {}
    for name in schemes:
        t = _model(name, sets_N, numel, seed)
        out[name] = Sync(name, "dp", t.scaled(factor) if factor != 1 else t, dense_ring=name == "allreduce")
    return out


@dataclass(frozen=True)
class Links:
    """What the pricing changes of a topology: the network's and NVLink's rates as factors of the preset's, and the
    dense rings' (NCCL's) own factor on the network's (a ring's throughput over TCP, as a share of line rate)."""

    inter: float = 1.0
    nvlink: float = 1.0
    dense_rings: float = 1.0

    def topology(self, template: Topology, *, per_node: bool, ring: bool = False) -> Topology:
        """``template`` with these rates: its nodes of ``gpus_per_node`` GPUs, or (``per_node``) one rank per node."""
        inter = template.inter_bandwidth * self.inter * (self.dense_rings if ring else 1.0)
        t = replace(template, inter_bandwidth=inter, intra_bandwidth=template.intra_bandwidth * self.nvlink)
        return replace(t, gpus_per_node=1) if per_node else t


@dataclass(frozen=True)
class Knobs:
    """One change of the model's assumptions (:func:`~zen_analysis.paper.numbers.levers`): compute times
    ``compute``, the links' rates (:class:`Links`), the overlap (None: the model's own)."""

    compute: float = 1.0
    links: Links = Links()
    overlap: float | None = None


AS_MODELLED = Knobs()
"""No change: the model as it stands."""


def ring_seconds(numel: float, ranks: int, topo: Topology) -> float:
    """A dense float32 ring all-reduce of ``numel`` elements over ``ranks`` of ``topo``, placed node by node:
    2 (n - 1) (alpha + ceil(numel / n) x 4 bytes / bandwidth) on the ring's slowest link."""
    t = Traffic(ranks)
    t.ring_all_reduce("ring", int(numel), VALUE_BYTES)
    return float(phase_times(t, topo.for_ranks(ranks))["seconds"].sum())


def intra_seconds(sync: Sync, template: Topology, links: Links) -> float:
    """Seconds of ``sync``'s dense collectives inside a node (NVLink): ``local_rank``'s ring reduce-scatter and
    all-gather, 2 (g - 1) (alpha + ceil(M / g) x 4 bytes / NVLink); ``node``'s pipelined reduce and broadcast,
    2 (M x 4 bytes / NVLink + (g - 1) alpha); none otherwise."""
    g, M = template.gpus_per_node, sync.intra_numel
    if not M or g < 2:
        return 0.0
    nvlink = template.intra_bandwidth * links.nvlink
    if sync.hierarchy == "node":
        return 2 * (M * VALUE_BYTES / nvlink + (g - 1) * template.intra_alpha_s)
    return 2 * (g - 1) * (template.intra_alpha_s + math.ceil(M / g) * VALUE_BYTES / nvlink)


def sync_seconds(sync: Sync, template: Topology, links: Links = Links()) -> tuple[float, float]:
    """(seconds inside the nodes, seconds across them) of ``sync`` on ``template``'s cluster at ``links``' rates."""
    per_node = sync.hierarchy != "flat"
    topo = links.topology(template, per_node=per_node, ring=sync.dense_ring).for_ranks(sync.traffic.world)
    across = float(phase_times(sync.traffic, topo)["seconds"].sum())
    return intra_seconds(sync, template, links), across
