"""Gradient synchronization: the training loop's contract with a sync and its implementations.

* :mod:`~zen_analysis.sync.contract`: :class:`TrainingSync` (the eight members the loop uses) and the records a sync
  hands it, :class:`SyncRecord` a step and :class:`SyncSummary` a run;
* :mod:`~zen_analysis.sync.grad_sync`: :class:`GradSync` (the contract with defaults, and the hooks a subclass
overrides)
  and the dense baseline, :class:`DenseAllReduce`;
* :mod:`~zen_analysis.sync.clip`: the clip by rows a sync applies to an embedding's gradient;
* :mod:`~zen_analysis.sync.sparse`: natural sparsity, the embedding summed by a sparse scheme (Zen by default);
* :mod:`~zen_analysis.sync.compressed`: compression sparsity, DGC top-k of every bucket summed by a sparse scheme;
* :mod:`~zen_analysis.sync.ddp`: the same two for a user's own ``DistributedDataParallel`` model (comm hooks).
* :mod:`~zen_analysis.sync.lookups`: the rows an embedding's forward looked up (a dense gradient's rows, for free).

With ``scheme="auto"`` each of them asks the planner (:mod:`zen_analysis.comm.planner`) which scheme sums a tensor.

:func:`~zen_analysis.train.registry.build_sync`, the one place a configured name becomes a sync, sits above this
package and :mod:`zen_analysis.local_sgd`, since it builds both.

Local SGD (:mod:`zen_analysis.local_sgd`) implements the same contract.
"""
