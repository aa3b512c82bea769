"""The interface: the ``zen-analysis`` command line (:mod:`~zen_analysis.interface.cli`) and the notebooks'
interactive density explorer (:mod:`~zen_analysis.interface.explore`), above every layer they drive."""
