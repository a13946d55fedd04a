"""taco-fairseq: TACO pre-training for fairseq. Importing it (or ``--user-dir taco_fairseq``)
registers the task, criteria and architectures, allow-lists fairseq checkpoints for weights-only
loading, applies :mod:`.fairseq_patches` and :mod:`.errors`; it imports none of the tools."""

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
