"""The research apparatus around the library: the drivers that train, replay and sweep to reproduce the papers'
figures and tables, the benchmarks, ``make reproduce``'s stages and the writers of the generated results pages. It
imports :mod:`zen_analysis` and nothing imports it but the command line (``zen-analysis bench``, ``reproduce``) and
the notebooks; a test keeps it so.

* :mod:`~zen_experiments.benchmarks` — the benchmark registry, as data (``zen-analysis bench <name>``);
  ``bench_*`` — one module per family of benchmarks, with their shared options (:mod:`~zen_experiments.bench_options`);
* :mod:`~zen_experiments.reproduce` — ``make reproduce``'s stages; :mod:`~zen_experiments.run_ids` — the runs it
  trains, read by the notebooks;
* :mod:`~zen_experiments.results_pages`, :mod:`~zen_experiments.page_tables`, :mod:`~zen_experiments.gpu_page` —
  the generated pages under ``docs/results/``; :mod:`~zen_experiments.headlines` — the values they quote over runs;
* :mod:`~zen_experiments.zen_runs` — Fig. 18 loss parity runs, the Theorem 2 imbalance table;
  :mod:`~zen_experiments.hashing_cost` — Fig. 16; :mod:`~zen_experiments.zen_speed` — ``zen_sum`` against dense
  all-reduce, AGsparse and BP-COO;
* :mod:`~zen_experiments.lab_sweeps`, :mod:`~zen_experiments.ddp_sweep`, :mod:`~zen_experiments.exchange_replay`,
  :mod:`~zen_experiments.fsdp_train` — schemes, training, DDP and FSDP2 measured behind shaped links;
* :mod:`~zen_experiments.lab_check` (with :mod:`~zen_experiments.lab_ranks`, :mod:`~zen_experiments.lab_calibration`)
  — the paper-scale model (:mod:`zen_analysis.paper`) checked in a lab where communication dominates;
  :mod:`~zen_experiments.paper_stage` — its ``make reproduce`` stage;
* :mod:`~zen_experiments.local_sgd_runs`, :mod:`~zen_experiments.pseudo_gradients` — EDiT / A-EDiT against the
  baselines, stragglers, the penalty ablation, sparse pseudo-gradients; :mod:`~zen_experiments.schemes`,
  :mod:`~zen_experiments.loss_targets` — what several of them share.

The scripts under ``scripts/`` are the apparatus's too: :mod:`~zen_experiments.scripts` lists every one.
"""
