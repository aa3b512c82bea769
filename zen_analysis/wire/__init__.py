"""The exchange primitives every scheme and Zen's kernels build on: :class:`~.exchange.Exchange` (collectives that
count their bytes and time their phases), COO packing (:mod:`~.coo`) and row helpers (:mod:`~.rows`), the dtype
on the wire (:mod:`~.dtypes`), the byte and time models (:mod:`~.traffic`, :mod:`~.cost`) and the cluster
topologies they price (:mod:`~.topology`). Below :mod:`zen_analysis.zen` and the schemes of
:mod:`zen_analysis.comm`."""
