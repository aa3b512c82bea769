"""Pricing without processes: the bytes a scheme moves from index sets alone (:mod:`~.traffic`, mirroring
:class:`zen_analysis.wire.exchange.Exchange` rule for rule), where ranks sit and what their links cost
(:mod:`~.topology`), the alpha-beta times (:mod:`~.cost`) and the formats' sizes of Fig. 17a (:mod:`~.formats`). Every
scheme prices itself with these; measuring and
calibrating them against real ranks is :mod:`zen_analysis.evaluation`."""
