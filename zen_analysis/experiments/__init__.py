"""Experiments: the drivers that train, replay and sweep to reproduce the papers' figures and tables, shared by
``make reproduce`` (:mod:`zen_analysis.reproduce`), ``make bench`` (:mod:`zen_analysis.bench`) and the notebooks.
They sit above everything they drive (algorithms, schemes, the launcher) and below the CLI.

* :mod:`~zen_analysis.experiments.zen` — Fig. 18 loss parity runs, the Theorem 2 imbalance table;
* :mod:`~zen_analysis.experiments.hashing_cost` — Fig. 16, the cost of building the push buckets;
* :mod:`~zen_analysis.experiments.zen_speed` — ``zen_sum`` against dense all-reduce, AGsparse and BP-COO;
* :mod:`~zen_analysis.experiments.netlab` — schemes, training and DDP measured behind shaped links;
* :mod:`~zen_analysis.experiments.local_sgd` — EDiT / A-EDiT against the baselines, stragglers, the penalty
  ablation.
"""
