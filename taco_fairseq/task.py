"""Task ``taco_masked_lm``: fairseq's ``masked_lm`` plus TACO's contrastive sampling."""

import argparse
import dataclasses
import functools
import itertools
import logging
import os
from dataclasses import dataclass, field
from typing import List, Optional

import numpy as np
from fairseq import utils
from fairseq.data import indexed_dataset
from fairseq.dataclass import ChoiceEnum
from fairseq.distributed import utils as distributed_utils
from fairseq.models.roberta import RobertaModel
from fairseq.tasks import register_task
from fairseq.tasks.masked_lm import MaskedLMTask
from omegaconf import II

from .batch import CrossWorkerTacoBatch
from .data import TC_POSITIONS, ContrastiveSamplingDataset
from .errors import InputNotFoundError, OptionError, hydra_relative_path_hint
from .metadata import SENTENCEPIECE_MODEL
from .resume import MaskedLMResumeConfig
from .sampling import SamplingOptions, window_outside_share
from .totals import AllWorkerTotals, UpdateTotalsEpochIterator

logger = logging.getLogger(__name__)


@dataclass
class TacoMaskedLMConfig(MaskedLMResumeConfig):
    tc_window: int = field(default=5, metadata={
        "help": "W: the positive is drawn at an offset in {-W//2..W//2}\\{0} from the anchor "
        "(odd, >= 3)"})
    tc_negatives: int = field(default=50, metadata={
        "help": "K: negatives per anchor, drawn from the other sequences of the batch"})
    tc_positions: ChoiceEnum(TC_POSITIONS) = field(default="all", metadata={
        "help": "anchors of the TC loss: all tokens (TACO), the masked ones (concentrated "
        "TACO) or the unmasked ones"})
    tc_exclude_special_tokens: bool = field(default=False, metadata={
        "help": "never use <s> and </s> as anchors, positives or negatives"})
    tc_cross_worker_negatives: bool = field(default=False, metadata={
        "help": "draw each anchor's negatives from the sequences of all data-parallel workers "
        "(all-gather of detached keys: not with --tc-key-gradients), as if one worker held the "
        "whole batch, instead of from its own worker's batch"})
    tc_allow_changed_objective: bool = field(default=False, metadata={
        "help": "resume from a checkpoint trained with other values of the options that "
        "define the objective (TC, masking, criterion; taco_fairseq.resume.OBJECTIVE_PREFIXES), "
        "with a warning naming them; without it such a resume is refused"})
    update_freq: List[int] = II("optimization.update_freq")
    batch_size: Optional[int] = II("dataset.batch_size")


def sampling_options(cfg) -> SamplingOptions:
    """The TC sampling options of the task's config ``cfg``, checked, as the one record the
    loader hands to the sampler; warn where the TC loss gets (almost) no data. (The masking
    options: :func:`check_masking_options`.)

    Raises:
        OptionError: naming the option, its value and what is allowed.
    """
    if cfg.tc_window < 3 or cfg.tc_window % 2 == 0:
        raise OptionError(f"--tc-window must be an odd integer >= 3 (the window W around the "
                          f"anchor, e.g. 5 as in the paper), got {cfg.tc_window}")
    if cfg.tc_negatives < 1:
        raise OptionError(f"--tc-negatives must be >= 1 (K negatives per anchor, 50 in the "
                          f"paper), got {cfg.tc_negatives}")
    if cfg.batch_size == 1 and not cfg.tc_cross_worker_negatives:
        logger.warning(
            "--batch-size 1: a batch of one sequence has no negatives, so the TC loss is "
            "skipped on every batch (tc_skipped). Use --batch-size >= 2, or "
            "--tc-cross-worker-negatives with several workers")
    if cfg.tc_window > cfg.tokens_per_sample:
        share = window_outside_share(cfg.tc_window, cfg.tokens_per_sample)
        logger.warning(
            f"--tc-window {cfg.tc_window} reaches beyond --tokens-per-sample "
            f"{cfg.tokens_per_sample}: the window is wider than a block, so {share:.0%} of the "
            "positives fall outside it and are drawn uniformly from the rest of the sequence "
            f"instead. Use a --tc-window of at most {cfg.tokens_per_sample} (5 in the paper)")
    return SamplingOptions(window=cfg.tc_window, num_negatives=cfg.tc_negatives,
                           cross_worker=cfg.tc_cross_worker_negatives)


def check_masking_options(cfg) -> None:
    """Check fairseq's masking options (``--mask-prob`` …) in the task's config ``cfg`` as
    fairseq's ``MaskTokensDataset`` does (it asserts each condition below, without a message,
    when the data is loaded); also NaN fails. ``0 < --mask-prob < 1`` also keeps
    ``--tc-positions masked`` (``unmasked``) from going without anchors.

    Raises:
        OptionError: naming the options of the first condition that fails, their values and
            the condition.
    """
    random, unmasked = cfg.random_token_prob, cfg.leave_unmasked_prob
    conditions = (  # (holds, fairseq's condition, the options it reads), in fairseq's order
        (0.0 < cfg.mask_prob < 1.0, "0.0 < mask_prob < 1.0", ("mask_prob",)),
        (0.0 <= random <= 1.0, "0.0 <= random_token_prob <= 1.0", ("random_token_prob",)),
        (0.0 <= unmasked <= 1.0, "0.0 <= leave_unmasked_prob <= 1.0", ("leave_unmasked_prob",)),
        (random + unmasked <= 1.0, "random_token_prob + leave_unmasked_prob <= 1.0",
         ("random_token_prob", "leave_unmasked_prob")),
        (cfg.mask_multiple_length >= 1, "mask_multiple_length >= 1", ("mask_multiple_length",)),
        (cfg.mask_stdev >= 0.0, "mask_stdev >= 0.0", ("mask_stdev",)),
    )
    for holds, condition, names in conditions:
        if not holds:
            given = ", ".join(f"--{name.replace('_', '-')} {getattr(cfg, name)}"
                              for name in names)
            raise OptionError(f"{given}: fairseq's masked LM needs {condition}")


def warn_of_few_anchors(cfg) -> None:
    """Warn when a batch of the task's config ``cfg`` is expected to hold fewer than one
    anchor: with ``--tc-positions masked`` (``unmasked``) a share ``--mask-prob`` (1 − it) of
    the at most ``--batch-size`` × ``--tokens-per-sample`` tokens of a batch are anchors, an
    upper bound of their mean (not known without ``--batch-size``). Most batches then have no
    TC loss, and an update without a masked token and an anchor trains on nothing (the
    ``taco`` criterion counts it in ``skipped_updates``)."""
    shares = {"masked": (cfg.mask_prob, "Raise"), "unmasked": (1 - cfg.mask_prob, "Lower")}
    if cfg.tc_positions not in shares or not cfg.batch_size:
        return
    share, fix = shares[cfg.tc_positions]
    expected = share * cfg.batch_size * cfg.tokens_per_sample
    if expected < 1:
        logger.warning(
            f"--tc-positions {cfg.tc_positions} with --mask-prob {cfg.mask_prob:g}: a batch of "
            f"--batch-size {cfg.batch_size} × --tokens-per-sample {cfg.tokens_per_sample} tokens "
            f"holds at most {expected:.3g} anchors on average, so most batches have no TC loss, "
            "and an update without a masked token and an anchor trains on nothing (counted in "
            f"skipped_updates). {fix} --mask-prob, raise --batch-size or --tokens-per-sample, "
            "or use --tc-positions all")


def check_token_ids(split_path: str, dictionary, combine: bool) -> None:
    """Check that the binarized split ``split_path`` (fairseq's mmap ``.bin``/``.idx``) holds
    only ids of ``dictionary``'s symbols, ``<mask>`` (added by the task, after them) excluded:
    a ``dict.txt`` shortened after binarization otherwise ends training in fairseq's
    ``AssertionError: Dataset contains mask_idx`` or an index error. With ``combine`` (fairseq
    passes it for the training split) the files ``split_path1``, ``split_path2``, ... that
    fairseq's ``load_indexed_dataset`` combines with it are checked too; without, only
    ``split_path``, as fairseq loads only that. Other dataset formats are not checked. The
    check reads each ``.bin`` whole, once per process and file version
    (:func:`_largest_token_id`), not again at each epoch's load.

    Raises:
        OptionError: naming the file, its largest id, the dictionary's size and the fix.
    """
    symbols = dictionary.index("<mask>")
    for shard in itertools.count():  # the files fairseq's load_indexed_dataset loads
        path = split_path + (str(shard) if shard else "")
        if (shard and not combine) or not indexed_dataset.MMapIndexedDataset.exists(path):
            return
        index = indexed_dataset.MMapIndexedDataset.Index(indexed_dataset.index_file_path(path))
        data = indexed_dataset.data_file_path(path)
        if os.path.getsize(data) == 0:
            continue
        stat = os.stat(data)
        largest = _largest_token_id(data, stat.st_size, stat.st_mtime_ns,
                                     np.dtype(index.dtype).str)
        if largest >= symbols:
            raise OptionError(
                f"--data: {data} holds token id {largest}, but {os.path.dirname(data)}/dict.txt "
                f"has ids up to {symbols - 1} (its symbols and fairseq's 4 special ones): "
                "dict.txt was changed after the data was binarized. Restore the dict.txt the "
                "data was binarized with, or binarize the text again with this one")


@functools.lru_cache(maxsize=None)
def _largest_token_id(data: str, size: int, mtime_ns: int, dtype: str) -> int:
    """The largest id in the ``.bin`` file ``data`` of ``dtype``; ``size`` and ``mtime_ns``
    key the cache to the file's version."""
    return int(np.memmap(data, dtype=np.dtype(dtype), mode="r").max())


def validate_training_setup(cfg, model_cfg, model) -> None:
    """Check the model of a training run (fairseq's precision options are checked for every
    task: ``fairseq_patches.check_precision``).

    Raises:
        OptionError: a model other than ``RobertaModel``, or ``--tokens-per-sample`` above its
            ``--max-positions``.
    """
    if not isinstance(model, RobertaModel):
        arch = getattr(model_cfg, "arch", None) or getattr(model_cfg, "_name", None)
        raise OptionError(
            f"--arch {arch}: the TC loss needs a RoBERTa model (fairseq's RobertaModel: "
            "roberta_tiny/mini/small/medium/base/large or roberta with size options)")
    if model.max_positions() < cfg.tokens_per_sample:
        raise OptionError(
            f"--tokens-per-sample {cfg.tokens_per_sample} exceeds the model's --max-positions "
            f"{model.max_positions()}: every longer block would be dropped. Lower "
            "--tokens-per-sample or raise --max-positions")


@register_task("taco_masked_lm", dataclass=TacoMaskedLMConfig)
class TacoMaskedLMTask(MaskedLMTask):
    """``masked_lm`` whose batches also carry TACO's positions (``batch["taco"]``) and their
    update's totals (``batch["update_totals"]``), which ``train_step`` sums over workers."""

    cfg: TacoMaskedLMConfig

    def __init__(self, cfg: TacoMaskedLMConfig, dictionary=None):
        """Check the options, before any data is loaded.

        Raises:
            OptionError: from :func:`sampling_options` and :func:`check_masking_options`.
            InputNotFoundError: ``--mask-whole-words`` without the data-bin's SentencePiece
                model (:attr:`args`).
        """
        sampling = sampling_options(cfg)
        check_masking_options(cfg)
        warn_of_few_anchors(cfg)
        super().__init__(cfg, dictionary)
        self.sampling = sampling
        self._totals = AllWorkerTotals()
        self.sentencepiece_model = os.path.join(utils.split_paths(cfg.data)[0],
                                                SENTENCEPIECE_MODEL)
        if cfg.mask_whole_words:
            self.args  # noqa: B018  (fails now, not when the data is loaded, without the model)

    @property
    def args(self) -> argparse.Namespace:
        """What fairseq's ``masked_lm`` reads from ``self.args`` for ``--mask-whole-words``:
        the data-bin's SentencePiece BPE (pieces starting with ``▁`` begin a word).

        Raises:
            InputNotFoundError: the data-bin has no ``sentencepiece.bpe.model``.
        """
        model = self.sentencepiece_model
        if not os.path.isfile(model):
            raise InputNotFoundError(
                f"--mask-whole-words needs the data-bin's SentencePiece model to find word "
                f"starts: {model} does not exist. Use a data-bin made by "
                "taco-prepare-data, or leave --mask-whole-words out")
        return argparse.Namespace(bpe="sentencepiece", sentencepiece_model=model)

    @classmethod
    def load_dict(cls, cfg):
        """fairseq's, with an error naming ``--data`` when it is no data-bin directory."""
        paths = utils.split_paths(cfg.data)
        fix = ("Point --data to a fairseq data-bin directory, e.g. one made by "
               "taco-prepare-data.")
        if paths and not os.path.isdir(paths[0]):
            raise InputNotFoundError(f"--data {cfg.data!r}: the directory {paths[0]!r} does not "
                                     f"exist{hydra_relative_path_hint(paths[0])}. {fix}")
        if not paths or not os.path.isfile(os.path.join(paths[0], "dict.txt")):
            raise InputNotFoundError(
                f"--data {cfg.data!r}: no dict.txt in {paths[0] if paths else cfg.data!r}. {fix}")
        return super().load_dict(cfg)

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        """fairseq's masked-LM dataset of ``split``, wrapped to draw the TC positions.

        Every data-parallel worker loads the same files, so the first (global rank 0) alone
        checks their token ids (a launcher ends the other workers when one fails: fairseq's
        ``torch.multiprocessing.spawn``, ``torchrun``).

        Raises:
            OptionError: token ids beyond ``dict.txt`` (:func:`check_token_ids`).
        """
        if distributed_utils.get_global_rank() == 0:
            paths = utils.split_paths(self.cfg.data)
            check_token_ids(os.path.join(paths[(epoch - 1) % len(paths)], split),
                            self.dictionary, combine)
        super().load_dataset(split, epoch=epoch, combine=combine, **kwargs)
        special = (self.dictionary.bos(), self.dictionary.eos())
        self.datasets[split] = ContrastiveSamplingDataset(
            self.datasets[split], pad_idx=self.dictionary.pad(),
            excluded_tokens=special if self.cfg.tc_exclude_special_tokens else (),
            positions=self.cfg.tc_positions, sampling=self.sampling, seed=self.cfg.seed)

    def build_model(self, cfg, from_checkpoint=False):
        """Build the model, checked for training (:func:`validate_training_setup`) unless
        ``from_checkpoint``.

        Raises:
            OptionError: from :func:`validate_training_setup`.
        """
        model = super().build_model(cfg, from_checkpoint)
        if not from_checkpoint:
            validate_training_setup(self.cfg, cfg, model)
        return model

    def get_batch_iterator(self, dataset, *args, **kwargs):
        """fairseq's epoch iterator over ``dataset`` (same arguments), wrapped so that each
        batch carries its update's totals (:class:`~taco_fairseq.totals.UpdateTotalsEpochIterator`,
        grouping ``--update-freq`` batches per update as fairseq's ``train.py`` does), which
        :meth:`train_step` needs.

        Returns:
            an :class:`~taco_fairseq.totals.UpdateTotalsEpochIterator`; the checkpoint state is
            the wrapped iterator's.
        """
        epoch_itr = super().get_batch_iterator(dataset, *args, **kwargs)
        return UpdateTotalsEpochIterator(epoch_itr, self.cfg.update_freq, self.dictionary.pad())

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        """Train on a copy of ``sample`` whose positions are those of a training step:
        ``training``, the update's totals summed over all data-parallel workers
        (:meth:`taco_fairseq.totals.AllWorkerTotals.of_step`) and, for a cross-worker batch,
        ``dummy`` (fairseq's padding batch: ``ignore_grad``).

        Raises:
            KeyError, RuntimeError: from :meth:`~taco_fairseq.totals.AllWorkerTotals.of_step`
                (a batch that did not come from :meth:`get_batch_iterator`, or out of order).
        """
        taco = sample["taco"]
        totals = self._totals.of_step(sample, ignore_grad, next(model.parameters()).device)
        dummy = {"dummy": bool(ignore_grad)} if isinstance(taco, CrossWorkerTacoBatch) else {}
        step = {**sample, "taco": dataclasses.replace(taco, training=True,
                                                      all_worker_totals=totals, **dummy)}
        return super().train_step(step, model, criterion, optimizer, update_num, ignore_grad)
