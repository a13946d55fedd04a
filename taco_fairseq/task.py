"""Task ``taco_masked_lm``: fairseq's ``masked_lm`` plus TACO's contrastive sampling."""

import argparse
import importlib.util
import logging
import os
from dataclasses import dataclass, field
from typing import List, Optional

import torch
from fairseq import utils
from fairseq.dataclass import ChoiceEnum
from fairseq.distributed import utils as distributed_utils
from fairseq.models.roberta import RobertaModel
from fairseq.tasks import register_task
from fairseq.tasks.masked_lm import MaskedLMConfig, MaskedLMTask
from omegaconf import II

from .batch import CrossWorkerTacoBatch
from .checkpoints import SENTENCEPIECE_MODEL
from .data import TC_POSITIONS, ContrastiveSamplingDataset, UpdateTotalsEpochIterator
from .errors import InputNotFoundError, OptionError, hydra_relative_path_hint

logger = logging.getLogger(__name__)


@dataclass
class TacoMaskedLMConfig(MaskedLMConfig):
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
        "(all-gather of detached keys; needs tc_detach_keys true), as if one worker held the "
        "whole batch, instead of from its own worker's batch"})
    update_freq: List[int] = II("optimization.update_freq")
    batch_size: Optional[int] = II("dataset.batch_size")
    save_dir: str = II("checkpoint.save_dir")
    fp16: bool = II("common.fp16")
    bf16: bool = II("common.bf16")
    amp: bool = II("common.amp")


def validate_sampling_options(cfg) -> None:
    """Check the TC sampling and masking options; warn where the TC loss gets (almost) no data.

    Raises:
        OptionError: naming the option, its value and what is allowed.
    """
    if cfg.tc_window < 3 or cfg.tc_window % 2 == 0:
        raise OptionError(f"--tc-window must be an odd integer >= 3 (the window W around the "
                          f"anchor, e.g. 5 as in the paper), got {cfg.tc_window}")
    if cfg.tc_negatives < 1:
        raise OptionError(f"--tc-negatives must be >= 1 (K negatives per anchor, 50 in the "
                          f"paper), got {cfg.tc_negatives}")
    if not 0.0 < cfg.mask_prob < 1.0:
        raise OptionError(
            f"--mask-prob must be in the open interval (0, 1), got {cfg.mask_prob}: fairseq's "
            "masking needs some masked and some unmasked tokens (0.15 in the paper)")
    for name in ("leave_unmasked_prob", "random_token_prob"):
        if not 0.0 <= getattr(cfg, name) <= 1.0:
            raise OptionError(
                f"--{name.replace('_', '-')} must be in [0, 1], got {getattr(cfg, name)}")
    if cfg.leave_unmasked_prob + cfg.random_token_prob > 1.0:
        raise OptionError("--leave-unmasked-prob plus --random-token-prob must be <= 1, got "
                          f"{cfg.leave_unmasked_prob} + {cfg.random_token_prob}")
    if cfg.mask_multiple_length < 1 or cfg.mask_stdev < 0:
        raise OptionError(f"--mask-multiple-length must be >= 1 and --mask-stdev >= 0, got "
                          f"{cfg.mask_multiple_length} and {cfg.mask_stdev}")
    if cfg.batch_size == 1 and not cfg.tc_cross_worker_negatives:
        logger.warning(
            "--batch-size 1: a batch of one sequence has no negatives, so the TC loss is "
            "skipped on every batch (tc_skipped). Use --batch-size >= 2, or "
            "--tc-cross-worker-negatives with several workers")
    if cfg.tc_window // 2 >= cfg.tokens_per_sample:
        logger.warning(
            f"--tc-window {cfg.tc_window} reaches beyond --tokens-per-sample "
            f"{cfg.tokens_per_sample}: positives then mostly fall back to a uniform draw from "
            "the rest of the sequence")


def validate_training_setup(cfg, model_cfg, model) -> None:
    """Check the model and the precision options of a training run.

    Raises:
        OptionError: a model other than ``RobertaModel``, ``--tokens-per-sample`` above its
            ``--max-positions``, ``--fp16`` without CUDA or ``--bf16`` without torch_xla (TPU).
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
    if cfg.fp16 and not torch.cuda.is_available():
        raise OptionError("--fp16 needs a CUDA GPU (fairseq's FP16Optimizer); on the CPU leave "
                          "it out and train in float32")
    if cfg.bf16 and importlib.util.find_spec("torch_xla") is None:
        raise OptionError("--bf16 means TPU training in fairseq (it implies --tpu) and needs "
                          "torch_xla; on GPUs use --fp16 or --amp, on the CPU leave it out")
    if cfg.amp and not torch.cuda.is_available():
        logger.warning("--amp without a GPU: fairseq autocasts CUDA operations only, so this "
                       "run trains in float32")


@register_task("taco_masked_lm", dataclass=TacoMaskedLMConfig)
class TacoMaskedLMTask(MaskedLMTask):
    """``masked_lm`` whose batches also carry TACO's positions (``batch["taco"]``) and, in
    training, the masked tokens and anchors of their whole update."""

    cfg: TacoMaskedLMConfig

    def __init__(self, cfg: TacoMaskedLMConfig, dictionary=None):
        validate_sampling_options(cfg)
        super().__init__(cfg, dictionary)
        self._update_totals = None  # all-worker totals of the batch group being trained
        self._warned_few_negatives = False
        self.sentencepiece_model = os.path.join(utils.split_paths(cfg.data)[0],
                                                SENTENCEPIECE_MODEL)
        if cfg.mask_whole_words:
            self.args  # noqa: B018  (fails now, not when the data is loaded, without the model)
        hint = hydra_relative_path_hint(cfg.save_dir)
        if hint:
            logger.warning(f"checkpoint.save_dir {cfg.save_dir!r} is relative: checkpoints go "
                           f"to {os.path.abspath(cfg.save_dir)}{hint}")

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
        super().load_dataset(split, epoch=epoch, combine=combine, **kwargs)
        special = (self.dictionary.bos(), self.dictionary.eos())
        self.datasets[split] = ContrastiveSamplingDataset(
            self.datasets[split], pad_idx=self.dictionary.pad(),
            excluded_tokens=special if self.cfg.tc_exclude_special_tokens else (),
            positions=self.cfg.tc_positions, window=self.cfg.tc_window,
            num_negatives=self.cfg.tc_negatives, seed=self.cfg.seed,
            cross_worker=self.cfg.tc_cross_worker_negatives)

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
        epoch_itr = super().get_batch_iterator(dataset, *args, **kwargs)
        return UpdateTotalsEpochIterator(epoch_itr, self.cfg.update_freq, self._batch_counts)

    def _batch_counts(self, batch):
        return {"masked_tokens": int(batch["target"].ne(self.dictionary.pad()).sum()),
                "anchors": len(batch["taco"].anchor)}

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        """Set ``sample["taco"].update_totals`` (the masked tokens and anchors of the whole
        update, summed over all data-parallel workers) and, for a cross-worker batch,
        ``dummy`` (fairseq's padding batch: ``ignore_grad``), then train."""
        taco = sample["taco"]
        taco.update_totals = self._all_worker_totals(sample, model, ignore_grad)
        if isinstance(taco, CrossWorkerTacoBatch):
            taco.dummy = bool(ignore_grad)
        elif 0 < taco.available_negatives < self.cfg.tc_negatives and not (
                self._warned_few_negatives):
            logger.warning(
                f"--tc-negatives {self.cfg.tc_negatives} exceeds the {taco.available_negatives} "
                "tokens of the other sequences of a batch: such anchors draw repeated negatives "
                "(sampling is with replacement). Lower --tc-negatives or use larger batches. "
                "(Shown once.)")
            self._warned_few_negatives = True
        return super().train_step(sample, model, criterion, optimizer, update_num, ignore_grad)

    def _all_worker_totals(self, sample, model, ignore_grad):
        """``[2]`` float64: the masked tokens and anchors of the update being trained, summed
        over all workers, all-reduced once at its first batch, the one after ``zero_grad()``
        set the gradients to None (on every worker alike, also after a skipped update)."""
        if self._update_totals is not None and any(
                p.grad is not None for p in model.parameters()):
            return self._update_totals  # later batches of the group (or dummy batches)
        if ignore_grad:  # a dummy batch opens an update in which this worker has no data
            local = {"masked_tokens": 0, "anchors": 0}
        else:
            local = sample.get("update_totals") or self._batch_counts(sample)
        totals = torch.tensor([local["masked_tokens"], local["anchors"]], dtype=torch.float64,
                              device=next(model.parameters()).device)
        if distributed_utils.get_data_parallel_world_size() > 1:
            totals = distributed_utils.all_reduce(
                totals, group=distributed_utils.get_data_parallel_group())
        self._update_totals = totals
        return totals
