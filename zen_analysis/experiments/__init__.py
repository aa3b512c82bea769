"""Experiments: the drivers that train, replay and sweep to reproduce the papers' figures and tables, shared by
``make reproduce`` (:mod:`~zen_analysis.experiments.reproduce`), ``make bench``
(:mod:`~zen_analysis.experiments.benchmarks`, the registry) and the notebooks. They sit above everything they
drive (algorithms, schemes, the launcher) and below the interface.

* :mod:`~zen_analysis.experiments.run_ids` — the runs ``make reproduce`` trains, read by the notebooks;
* :mod:`~zen_analysis.experiments.reproduce` — ``make reproduce``'s stages;
* ``bench_*`` — one module per family of benchmarks (analysis, schemes, the lab, DDP, training, local SGD), with
  their shared options (:mod:`~zen_analysis.experiments.bench_options`);
* :mod:`~zen_analysis.experiments.zen_runs` — Fig. 18 loss parity runs, the Theorem 2 imbalance table;
* :mod:`~zen_analysis.experiments.hashing_cost` — Fig. 16, the cost of building the push buckets;
* :mod:`~zen_analysis.experiments.zen_speed` — ``zen_sum`` against dense all-reduce, AGsparse and BP-COO;
* :mod:`~zen_analysis.experiments.lab_sweeps` — schemes, training and DDP measured behind shaped links;
* :mod:`~zen_analysis.experiments.exchange_replay` — captured rows summed by stock DDP's sparse path and by the schemes;
* :mod:`~zen_analysis.experiments.paper_scale` — the Zen paper's Fig. 11-14 modelled from captured traces;
* :mod:`~zen_analysis.experiments.paper_figures` — its Fig. 11-15 and 17b modelled from workloads with its stated
  statistics, each scheme in its own hierarchy (:mod:`~zen_analysis.experiments.paper_hierarchy`), the paper's numbers
  beside the model's (:mod:`~zen_analysis.experiments.paper_numbers`);
* :mod:`~zen_analysis.experiments.local_sgd_runs` — EDiT / A-EDiT against the baselines, stragglers, the penalty
  ablation.
"""
