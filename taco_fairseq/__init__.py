"""taco-fairseq: TACO pre-training for fairseq. Importing it (or ``--user-dir taco_fairseq``)
registers the task, criteria and architectures, allow-lists fairseq checkpoints for weights-only
loading, applies :mod:`.fairseq_patches` and :mod:`.errors`; it imports none of the tools."""

from . import criterion, errors, fairseq_patches, models, task  # noqa: F401

errors.install_excepthook()
fairseq_patches.apply()

__version__ = "0.1.0"
