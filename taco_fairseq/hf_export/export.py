"""Export a fairseq RoBERTa checkpoint to a transformers directory, checked against fairseq.

:func:`export_to_transformers` writes, for a pre-training checkpoint (``taco_masked_lm`` or
``masked_lm`` task), a ``RobertaForMaskedLM`` and, for a fine-tuned ``sentence_prediction`` one,
a ``RobertaForSequenceClassification`` (``problem_type="regression"`` for a regression head such
as STS-B's), into a directory that ``AutoModelFor...``/``AutoTokenizer.from_pretrained`` load
offline::

    config.json             RobertaConfig (architectures, sizes, labels)
    model.safetensors       the weights (fp32)
    tokenizer_config.json   the tokenizer (BartphoTokenizer: SentencePiece + fairseq dict.txt,
    sentencepiece.bpe.model   see taco_fairseq.hf_export.tokenizer)
    dict.txt
    export_info.json        source checkpoint, versions, and the parity check's figures

The directory is written under a temporary name next to ``output_dir``, loaded back from disk,
compared with fairseq (:func:`taco_fairseq.hf_export.parity.check_parity`) and renamed to
``output_dir`` only if the check passes, with the permissions of a directory made under the
user's umask (:func:`umask_permissions`); otherwise it is removed and :class:`ParityError` is
raised.
"""

import json
import logging
import os
import platform
import shutil
import tempfile
from pathlib import Path
from typing import Optional, Sequence, Union

import fairseq
import torch
import transformers
from transformers import AutoModelForMaskedLM, AutoModelForSequenceClassification, AutoTokenizer

from .. import __version__
from ..hub import from_pretrained, resolve_checkpoint
from .check_text import select_check_text
from .parity import DEFAULT_ATOL, ParityReport, check_parity
from .tokenizer import build_tokenizer
from .weights import to_transformers

logger = logging.getLogger(__name__)

PathLike = Union[str, Path]

#: fairseq tasks whose checkpoints export to RobertaForMaskedLM.
MASKED_LM_TASKS = ("taco_masked_lm", "masked_lm")
#: The fairseq task whose checkpoints export to RobertaForSequenceClassification.
CLASSIFICATION_TASK = "sentence_prediction"
INFO_FILE = "export_info.json"


def export_to_transformers(
    checkpoint: PathLike,
    output_dir: PathLike,
    check_lines: Sequence[str],
    *,
    data_dir: Optional[PathLike] = None,
    sentencepiece_model: Optional[PathLike] = None,
    classification_head: Optional[str] = None,
    atol: float = DEFAULT_ATOL,
    force: bool = False,
) -> ParityReport:
    """Export ``checkpoint`` to ``output_dir`` and check it against fairseq (module doc).

    Args:
        checkpoint: a checkpoint file or save directory (:func:`taco_fairseq.hub.from_pretrained`).
        output_dir: the transformers directory to create.
        check_lines: real text lines for the parity check
            (:func:`taco_fairseq.hf_export.check_text.read_check_lines`).
        data_dir, sentencepiece_model: as for :func:`taco_fairseq.hub.from_pretrained`.
        classification_head: the head to export from a ``sentence_prediction`` checkpoint
            with several heads (default: its only one).
        atol: the largest absolute logit difference accepted (fp32).
        force: replace an existing ``output_dir``.

    Returns:
        the parity check's figures (also in ``output_dir/export_info.json``).

    Raises:
        FileExistsError: if ``output_dir`` exists and not ``force``.
        ValueError: if the checkpoint's task, options or dictionary cannot be exported (the
            message names them), or ``check_lines`` is empty.
        ParityError: if the export does not reproduce fairseq (nothing is left behind).
    """
    output_dir = Path(output_dir)
    if output_dir.exists() and not force:
        raise FileExistsError(f"{output_dir} exists; choose another directory or use --force")
    checkpoint = resolve_checkpoint(checkpoint)
    hub = from_pretrained(checkpoint, data_dir, sentencepiece_model).float()
    task_name = hub.cfg.task._name
    head, regression, id2label = _head(hub, task_name, classification_head)
    hf_model = to_transformers(
        hub.model, classification_head=head, regression=regression, id2label=id2label
    )
    sp = hub.bpe.sp
    check = select_check_text(check_lines, sp.encode, sp.unk_id(), hub.model.max_positions())

    output_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{output_dir.name}.", dir=output_dir.parent))
    try:
        tokenizer = build_tokenizer(
            hub.task.source_dictionary, hub.cfg.bpe.sentencepiece_model, staging,
            max_positions=hub.model.max_positions(),
        )
        hf_model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        auto_class = AutoModelForMaskedLM if head is None else AutoModelForSequenceClassification
        report = check_parity(
            hub,
            auto_class.from_pretrained(staging).eval(),
            AutoTokenizer.from_pretrained(staging),
            check,
            classification_head=head,
            atol=atol,
        )
        info = {
            "checkpoint": str(checkpoint.resolve()),
            "task": task_name,
            "arch": getattr(hub.model.args, "arch", None),
            "classification_head": head,
            "architecture": hf_model.config.architectures[0],
            "parity": report.as_dict(),
            "versions": {
                "taco_fairseq": __version__, "fairseq": fairseq.__version__,
                "transformers": transformers.__version__, "torch": torch.__version__,
                "python": platform.python_version(),
            },
        }
        (staging / INFO_FILE).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
        umask_permissions(staging)
        if output_dir.exists():
            shutil.rmtree(output_dir)
        staging.rename(output_dir)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    logger.info(
        "exported %s to %s; parity: %d texts / %d ids tokenized identically, %d logits within "
        "%.1g (max difference %.3g)", checkpoint, output_dir, report.tokenized_texts,
        report.tokenized_ids, report.compared_logits, atol, report.max_abs_diff,
    )
    return report


def umask_permissions(directory: Path) -> None:
    """Give ``directory``, and every directory and file under it, the mode that
    ``os.makedirs`` and ``open`` give under the user's umask (0755 and 0644 under umask 022):
    ``tempfile.mkdtemp`` makes the staging directory 0700, and transformers writes
    ``model.safetensors`` 0600."""
    umask = os.umask(0)  # the only way to read it; set back at once
    os.umask(umask)
    for root, directories, files in os.walk(directory):
        os.chmod(root, 0o777 & ~umask)
        for name in files:
            os.chmod(os.path.join(root, name), 0o666 & ~umask)


def _head(hub, task_name: str, classification_head: Optional[str]):
    """(head name or None, regression, id2label) of the export."""
    if task_name in MASKED_LM_TASKS:
        if classification_head is not None:
            raise ValueError(
                f"--classification-head applies to {CLASSIFICATION_TASK} checkpoints; this "
                f"one is a {task_name} checkpoint (exported as RobertaForMaskedLM)"
            )
        return None, False, None
    if task_name != CLASSIFICATION_TASK:
        raise ValueError(
            f"cannot export a checkpoint of task {task_name!r}: supported are "
            f"{', '.join(MASKED_LM_TASKS)} (RobertaForMaskedLM) and {CLASSIFICATION_TASK} "
            "(RobertaForSequenceClassification)"
        )
    heads = list(hub.model.classification_heads)
    if classification_head is None:
        if len(heads) != 1:
            raise ValueError(
                f"the checkpoint has classification heads {heads}; pick one with "
                "--classification-head"
            )
        classification_head = heads[0]
    elif classification_head not in heads:
        raise ValueError(
            f"--classification-head {classification_head!r}: the checkpoint has {heads}"
        )
    if hub.cfg.task.regression_target:
        return classification_head, True, None
    labels = hub.task.label_dictionary
    num_classes = hub.model.classification_heads[classification_head].out_proj.out_features
    id2label = {i: labels[labels.nspecial + i] for i in range(num_classes)}
    return classification_head, False, id2label
