"""taco-fairseq: TACO pre-training for fairseq.

Importing the package (or ``--user-dir taco_fairseq``) registers the ``taco_masked_lm`` task,
the ``taco``, ``mlm`` and ``sentence_prediction_summable`` criteria and the
``roberta_{tiny,mini,small,medium}`` architectures, allow-lists fairseq checkpoints for
``torch.load(weights_only=True)``, applies :mod:`taco_fairseq.fairseq_patches` and reports
configuration errors in one line (:mod:`taco_fairseq.errors`); none of the tools.
"""

import warnings

# fairseq's FairseqTask.train_step enters torch.cuda.amp.autocast on every update, which torch
# >= 2.4 reports as deprecated each time; the message says nothing about this project.
warnings.filterwarnings(
    "ignore", message=r"`torch\.cuda\.amp\.autocast\(args\.\.\.\)` is deprecated",
    category=FutureWarning,
)

from . import criterion, errors, fairseq_patches, models, task  # noqa: E402,F401

errors.install_excepthook()
fairseq_patches.apply()

__version__ = "0.1.0"
