"""taco-fairseq: TACO pre-training for fairseq.

Importing the package (or passing ``--user-dir taco_fairseq``) registers the ``taco_masked_lm``
task, the ``taco``, ``mlm`` and ``sentence_prediction_summable`` (GLUE) criterions and the
``roberta_{tiny,mini,small,medium}`` architectures, lets fairseq checkpoints load under
``torch.load(weights_only=True)``, applies the fixes of :mod:`taco_fairseq.fairseq_patches` and
reports the plugin's configuration errors in one line (:mod:`taco_fairseq.errors`).
"""

import warnings

# fairseq's FairseqTask.train_step enters torch.cuda.amp.autocast on every update, which torch
# >= 2.4 reports as deprecated each time; the message says nothing about this project.
warnings.filterwarnings(
    "ignore", message=r"`torch\.cuda\.amp\.autocast\(args\.\.\.\)` is deprecated",
    category=FutureWarning,
)

from . import checkpoint_compat  # noqa: E402,F401  (allow-lists the globals of fairseq checkpoints)
from . import errors, fairseq_patches  # noqa: E402
from .criterions import mlm, sentence_prediction_summable, taco  # noqa: E402,F401
from .models import roberta_sizes  # noqa: E402,F401
from . import task  # noqa: E402,F401

errors.install_excepthook()
fairseq_patches.apply()

__version__ = "0.1.0"
