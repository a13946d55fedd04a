"""Initialize the token-embedding matrix from another checkpoint and/or freeze it.

The paper's frozen-embedding study (§2.2, Figure 4) trains BERT with its embedding matrix
frozen, initialized either at random or from a well-trained checkpoint. What is frozen here is
the token-embedding matrix ``encoder.sentence_encoder.embed_tokens.weight`` (``[vocab,
hidden]``). With tied input and output embeddings (RoBERTa's default) this is the same
parameter as the LM head's output projection ``encoder.lm_head.weight``, so both stay fixed;
with ``--untie-weights-roberta`` only the input embedding is frozen and the output projection
trains. Position embeddings, the embedding LayerNorm and the LM head's bias, dense layer and
LayerNorm always train.

A frozen parameter has ``requires_grad = False`` before fairseq builds its optimizer, so the
optimizer never holds it: no update, no weight decay, no share of the gradient norm.
"""

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import torch
from fairseq import checkpoint_utils
from fairseq.dataclass import FairseqDataclass

from ..errors import InputNotFoundError, OptionError

logger = logging.getLogger(__name__)

#: Name of the token-embedding matrix in a RoBERTa state dict.
TOKEN_EMBEDDING_KEY = "encoder.sentence_encoder.embed_tokens.weight"


@dataclass
class TokenEmbeddingConfig(FairseqDataclass):
    """Task options (a base of ``taco_masked_lm``'s config)."""

    freeze_token_embeddings: bool = field(
        default=False,
        metadata={
            "help": "never update the token-embedding matrix (with tied weights also the "
            "output projection)"
        },
    )
    init_token_embeddings_from: Optional[str] = field(
        default=None,
        metadata={
            "help": "copy the token-embedding matrix from this checkpoint before training "
            "(same dictionary and hidden size); default: random initialization"
        },
    )


def setup_token_embeddings(model, cfg: TokenEmbeddingConfig, from_checkpoint: bool) -> None:
    """Apply ``--init-token-embeddings-from`` and ``--freeze-token-embeddings`` to a freshly
    built RoBERTa-style model (``model.encoder.sentence_encoder.embed_tokens``).

    Args:
        model: the model, before the optimizer is built.
        cfg: the task's config.
        from_checkpoint: the model is being built to load a checkpoint (its weights will be
            overwritten, so the initialization is skipped).

    Raises:
        InputNotFoundError: if the checkpoint of ``--init-token-embeddings-from`` is missing.
        OptionError: if it has no token-embedding matrix of the model's shape.
    """
    weight = model.encoder.sentence_encoder.embed_tokens.weight
    if cfg.init_token_embeddings_from and not from_checkpoint:
        source = load_token_embeddings(cfg.init_token_embeddings_from)
        if source.shape != weight.shape:
            raise OptionError(
                f"--init-token-embeddings-from {cfg.init_token_embeddings_from}: its token "
                f"embeddings are {tuple(source.shape)}, the model's {tuple(weight.shape)} "
                "[vocab, hidden]; use a checkpoint trained on the same dict.txt with the same "
                "hidden size"
            )
        with torch.no_grad():
            weight.copy_(source)
        logger.info("token embeddings copied from %s", cfg.init_token_embeddings_from)
    if cfg.freeze_token_embeddings:
        weight.requires_grad_(False)
        tied = weight is model.encoder.lm_head.weight
        logger.info(
            "token embeddings frozen%s", " (tied: also the output projection)" if tied else ""
        )


def load_token_embeddings(path: str) -> torch.Tensor:
    """The ``[vocab, hidden]`` token-embedding matrix of a fairseq RoBERTa checkpoint.

    Raises:
        InputNotFoundError: naming the option and the path.
        OptionError: if the checkpoint has no ``encoder.sentence_encoder.embed_tokens.weight``.
    """
    if not Path(path).is_file():
        raise InputNotFoundError(f"--init-token-embeddings-from: no such checkpoint: {path}")
    state = checkpoint_utils.load_checkpoint_to_cpu(path)
    if TOKEN_EMBEDDING_KEY not in state["model"]:
        raise OptionError(
            f"--init-token-embeddings-from {path}: no {TOKEN_EMBEDDING_KEY} in the checkpoint "
            "(not a RoBERTa model?)"
        )
    return state["model"][TOKEN_EMBEDDING_KEY]
