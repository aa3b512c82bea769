"""What goes on the wire: :class:`~.exchange.Exchange` (collectives that count their bytes and time their phases),
the formats a scheme packs (COO entries :mod:`~.coo`, embedding rows :mod:`~.rows`), the dtype contract
(:mod:`~.dtypes`) and the collectives held until gloo lets go (:mod:`~.inflight`). The hash bitmap's encoding is Zen's
own (:mod:`zen_analysis.zen.bitmap`: it needs Zen's hash h0, and Zen's kernels build on this folder). Below
:mod:`zen_analysis.pricing`, :mod:`zen_analysis.zen`
and the schemes of :mod:`zen_analysis.comm`."""
