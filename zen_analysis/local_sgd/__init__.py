"""Local SGD methods on the one training loop: Post-Local SGD, DiLoCo and EDiT (Cheng et al., ICLR'25) with its
pseudo-gradient penalty, and A-EDiT (time-based syncs). ``sync.method`` = ``post_local_sgd`` | ``diloco`` |
``edit`` | ``a_edit`` selects them."""

from zen_analysis.config.names import METHODS  # the names of config.names.MethodName, in its order
from zen_analysis.local_sgd.engine import LocalSGD
from zen_analysis.local_sgd.settings import LocalSGDConfig, method_config

__all__ = ["METHODS", "LocalSGD", "LocalSGDConfig", "method_config"]
