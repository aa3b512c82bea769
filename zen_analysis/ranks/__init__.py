"""Rank processes: starting N of them, watching them and naming the first that fails (:mod:`~.procs`), the
environment a rank reads its place from (:mod:`~.env`), the entry point a rank or a lab node runs
(:mod:`~.entry`), and the network lab's shaped links between them (:mod:`~.netlab`).

Below training: nothing here knows what a rank computes. Run directories and the training launcher, which do,
are in :mod:`zen_analysis.runs`."""
