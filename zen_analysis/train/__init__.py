"""Training: the one training loop (:mod:`~.loop`), the row-wise optimizer (:mod:`~.optim`), injected stragglers
(:mod:`~.perturb`) and the registry that turns a configured sync name into a sync (:mod:`~.registry`). The
models and data it trains are in :mod:`zen_analysis.workload`."""
