"""Task ``taco_masked_lm``: fairseq's ``masked_lm`` plus TACO's contrastive sampling."""

import logging
import os
from dataclasses import dataclass, field
from typing import List

import torch
from fairseq import utils
from fairseq.dataclass import ChoiceEnum
from fairseq.distributed import utils as distributed_utils
from fairseq.tasks import register_task
from fairseq.tasks.masked_lm import MaskedLMConfig, MaskedLMTask
from omegaconf import II

from ..data.contrastive_sampling_dataset import TC_POSITIONS, ContrastiveSamplingDataset
from ..data.update_totals import UpdateTotalsEpochIterator
from ..models.token_embeddings import TokenEmbeddingConfig, setup_token_embeddings

logger = logging.getLogger(__name__)


@dataclass
class TacoMaskedLMConfig(MaskedLMConfig, TokenEmbeddingConfig):
    tc_window: int = field(
        default=5,
        metadata={
            "help": "W: the positive is drawn at an offset in {-W//2..W//2}\\{0} from the "
            "anchor (odd, >= 3)"
        },
    )
    tc_negatives: int = field(
        default=50,
        metadata={"help": "K: negatives per anchor, drawn from the other sequences of the batch"},
    )
    tc_positions: ChoiceEnum(TC_POSITIONS) = field(
        default="all",
        metadata={
            "help": "anchors of the TC loss: all tokens (TACO), the masked ones "
            "(concentrated TACO) or the unmasked ones"
        },
    )
    tc_exclude_special_tokens: bool = field(
        default=False,
        metadata={"help": "never use <s> and </s> as anchors, positives or negatives"},
    )
    update_freq: List[int] = II("optimization.update_freq")


def validate_sampling_options(cfg) -> None:
    """Check the TC sampling options of the task's config.

    Raises:
        ValueError: naming the option, its value and what is allowed.
    """
    if cfg.tc_window < 3 or cfg.tc_window % 2 == 0:
        raise ValueError(
            f"--tc-window must be an odd integer >= 3 (the window W around the anchor, "
            f"e.g. 5 as in the paper), got {cfg.tc_window}"
        )
    if cfg.tc_negatives < 1:
        raise ValueError(
            f"--tc-negatives must be >= 1 (K negatives per anchor, 50 in the paper), "
            f"got {cfg.tc_negatives}"
        )
    for name in ("mask_prob", "leave_unmasked_prob", "random_token_prob"):
        value = getattr(cfg, name)
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"--{name.replace('_', '-')} must be in [0, 1], got {value}")
    if cfg.leave_unmasked_prob + cfg.random_token_prob > 1.0:
        raise ValueError(
            "--leave-unmasked-prob plus --random-token-prob must be <= 1, got "
            f"{cfg.leave_unmasked_prob} + {cfg.random_token_prob}"
        )


@register_task("taco_masked_lm", dataclass=TacoMaskedLMConfig)
class TacoMaskedLMTask(MaskedLMTask):
    """``masked_lm`` (same data, masking and defaults) whose batches also carry TACO's
    sampled anchor, positive and negative positions (``batch["taco"]``), and whose training
    batches carry the masked-token and anchor totals of their update (``update_totals``).
    """

    cfg: TacoMaskedLMConfig

    def __init__(self, cfg: TacoMaskedLMConfig, dictionary=None):
        validate_sampling_options(cfg)
        super().__init__(cfg, dictionary)
        self._update_totals = (None, None)  # (update_num, all-worker totals)

    @classmethod
    def load_dict(cls, cfg):
        paths = utils.split_paths(cfg.data)
        if not paths or not os.path.isfile(os.path.join(paths[0], "dict.txt")):
            raise FileNotFoundError(
                f"--data {cfg.data!r}: no dict.txt in {paths[0] if paths else cfg.data!r}. "
                "Point --data to a fairseq data-bin directory, e.g. one made by "
                "scripts/prepare_pretraining_data.py."
            )
        return super().load_dict(cfg)

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        super().load_dataset(split, epoch=epoch, combine=combine, **kwargs)
        special = (self.dictionary.bos(), self.dictionary.eos())
        self.datasets[split] = ContrastiveSamplingDataset(
            self.datasets[split],
            pad_idx=self.dictionary.pad(),
            excluded_tokens=special if self.cfg.tc_exclude_special_tokens else (),
            positions=self.cfg.tc_positions,
            window=self.cfg.tc_window,
            num_negatives=self.cfg.tc_negatives,
            seed=self.cfg.seed,
        )

    def build_model(self, cfg, from_checkpoint=False):
        """fairseq's model, with ``--init-token-embeddings-from`` and
        ``--freeze-token-embeddings`` applied (:mod:`taco_fairseq.models.token_embeddings`)."""
        model = super().build_model(cfg, from_checkpoint)
        setup_token_embeddings(model, self.cfg, from_checkpoint)
        return model

    def get_batch_iterator(self, dataset, *args, **kwargs):
        epoch_itr = super().get_batch_iterator(dataset, *args, **kwargs)
        return UpdateTotalsEpochIterator(epoch_itr, self.cfg.update_freq, self._batch_counts)

    def _batch_counts(self, batch):
        return {
            "masked_tokens": int(batch["target"].ne(self.dictionary.pad()).sum()),
            "anchors": len(batch["taco"]["anchor"]),
        }

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        """Attach ``sample["taco"]["update_totals"]``: ``[2]`` float tensor, the masked tokens
        and anchors of the whole update summed over all data-parallel workers, then train."""
        sample["taco"]["update_totals"] = self._all_worker_totals(
            sample, model, update_num, ignore_grad
        )
        return super().train_step(sample, model, criterion, optimizer, update_num, ignore_grad)

    def _all_worker_totals(self, sample, model, update_num, ignore_grad):
        cached_update, totals = self._update_totals
        if cached_update == update_num:
            return totals  # later batches of the update (or fairseq's dummy batches)
        if ignore_grad:  # a dummy batch opens an update in which this worker has no data
            local = {"masked_tokens": 0, "anchors": 0}
        else:
            local = sample.get("update_totals") or self._batch_counts(sample)
        device = next(model.parameters()).device
        totals = torch.tensor(
            [local["masked_tokens"], local["anchors"]], dtype=torch.float64, device=device
        )
        if distributed_utils.get_data_parallel_world_size() > 1:
            totals = distributed_utils.all_reduce(
                totals, group=distributed_utils.get_data_parallel_group()
            )
        self._update_totals = (update_num, totals)
        return totals
