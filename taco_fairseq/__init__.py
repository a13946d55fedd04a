"""taco-fairseq: TACO pre-training for fairseq.

Importing the package (or passing ``--user-dir taco_fairseq``) registers the ``taco_masked_lm``
task, the ``taco`` criterion, the ``sentence_prediction_summable`` criterion (GLUE) and the
``roberta_{tiny,mini,small,medium}`` architectures, and lets fairseq checkpoints load under
``torch.load(weights_only=True)``.
"""

from . import checkpoint_compat  # noqa: F401  (allow-lists the globals of fairseq checkpoints)
from .criterions import sentence_prediction_summable, taco  # noqa: F401
from .models import roberta_sizes  # noqa: F401
from .tasks import taco_masked_lm  # noqa: F401

__version__ = "0.1.0"
