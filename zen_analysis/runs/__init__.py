"""Runs: a run's directory, its lock and stored config (:mod:`~.rundir`), the launcher that trains a config on N
ranks and returns its :class:`~.launch.RunResult` (:mod:`~.launch`), and the observers that watch it while it
runs (:mod:`~.observe`). Above training (the launcher starts the loop); the processes themselves are
:mod:`zen_analysis.ranks`'."""
