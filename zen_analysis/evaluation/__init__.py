"""The schemes evaluated, measured and modelled: run them on real gloo ranks (:mod:`~.measure`), fit this
machine's links and local work (:mod:`~.calibrate`), replay a run's captured tensors measured beside the model
(:mod:`~.replay`, ``zen-analysis replay``) and price every captured step on the topology presets
(:mod:`~.evaluate`, ``zen-analysis evaluate``). Above the schemes (:mod:`zen_analysis.comm`) and the pricing models
(:mod:`zen_analysis.pricing`)."""
