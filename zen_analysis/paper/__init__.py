"""The Zen paper's evaluation modelled at its own scale: what a cluster like the paper's (16 machines x 8 V100,
NVLink inside a machine, 25 Gbit/s TCP or 100 Gbit/s RDMA between them) gives each scheme, from the workloads with
the paper's stated statistics (:mod:`zen_analysis.sparsity.paper_workloads`) or from a run's captured traces.

* :mod:`~zen_analysis.paper.figures` — Fig. 11-15 and 17b from the workloads, every scheme priced in its own
  hierarchy (:mod:`~zen_analysis.paper.hierarchy`), the paper's numbers beside the model's
  (:mod:`~zen_analysis.paper.numbers`, read after the pricing, never by it);
* :mod:`~zen_analysis.paper.scale` — Fig. 11-14 from a run's captured traces, scaled to the paper's sizes;
* :mod:`~zen_analysis.paper.compute` — one training step of the paper's LSTM and DeepFM, timed, the compute the
  model uses where a GPU measured it (an assumed peak x utilization elsewhere, labelled as such).

The benchmarks that print and check these (``zen-analysis bench paper``, ``paper-figures``, ``lab-check``) are the
apparatus's, :mod:`zen_experiments`.
"""
