"""RoBERTa at the BERT miniature sizes (Turc et al., 2019; ``roberta_small`` is the paper's
BERT-small), with the options of the paper's frozen-embedding study (§2.2, Figure 4). A frozen
token-embedding matrix is left out of fairseq's optimizer: no update, weight decay or share of
the gradient norm."""

import logging
from pathlib import Path

import torch
from fairseq import checkpoint_utils
from fairseq.models import register_model, register_model_architecture
from fairseq.models.roberta import RobertaModel
from fairseq.models.roberta.model import base_architecture
from fairseq.utils import safe_getattr

from .errors import InputNotFoundError, OptionError

logger = logging.getLogger(__name__)

#: name -> (layers, hidden, attention heads, FFN hidden)
SIZES = {
    "roberta_tiny": (2, 128, 2, 512),
    "roberta_mini": (4, 256, 4, 1024),
    "roberta_small": (4, 512, 8, 2048),
    "roberta_medium": (8, 512, 8, 2048),
}

#: Name of the token-embedding matrix in a RoBERTa state dict.
TOKEN_EMBEDDING_KEY = "encoder.sentence_encoder.embed_tokens.weight"


@register_model("taco_roberta")
class TacoRobertaModel(RobertaModel):
    """fairseq's ``RobertaModel`` with ``--freeze-token-embeddings`` and
    ``--init-token-embeddings-from``. A loader rebuilding such a model reads that file again
    unless it passes ``arg_overrides={"init_token_embeddings_from": None}`` (:mod:`.hub` does)."""

    @staticmethod
    def add_args(parser):
        RobertaModel.add_args(parser)
        parser.add_argument("--freeze-token-embeddings", action="store_true", help=(
            "never update the token-embedding matrix (with tied weights also the output "
            "projection)"))
        parser.add_argument("--init-token-embeddings-from", metavar="CHECKPOINT", help=(
            "copy the token-embedding matrix from this checkpoint before training (same "
            "dictionary and hidden size); default: random initialization"))

    @classmethod
    def build_model(cls, args, task):
        """fairseq's RoBERTa with the token-embedding options applied.

        Raises:
            InputNotFoundError: the checkpoint of ``--init-token-embeddings-from`` is missing.
            OptionError: it has no token-embedding matrix of the model's shape.
        """
        model = super().build_model(args, task)
        weight = model.encoder.sentence_encoder.embed_tokens.weight
        source = safe_getattr(args, "init_token_embeddings_from", None)
        if source:
            embedding = load_token_embeddings(source)
            if embedding.shape != weight.shape:
                raise OptionError(
                    f"--init-token-embeddings-from {source}: its token embeddings are "
                    f"{tuple(embedding.shape)}, the model's {tuple(weight.shape)} [vocab, "
                    "hidden]; use a checkpoint trained on the same dict.txt with the same "
                    "hidden size")
            with torch.no_grad():
                weight.copy_(embedding)
            logger.info("token embeddings copied from %s", source)
        if safe_getattr(args, "freeze_token_embeddings", False):
            weight.requires_grad_(False)
            tied = weight is model.encoder.lm_head.weight
            logger.info("token embeddings frozen%s", " (tied: also the output projection)"
                        if tied else "")
        return model


def load_token_embeddings(path: str) -> torch.Tensor:
    """The ``[vocab, hidden]`` token-embedding matrix of a fairseq RoBERTa checkpoint.

    Raises:
        InputNotFoundError, OptionError: no such file; no such matrix in it.
    """
    if not Path(path).is_file():
        raise InputNotFoundError(f"--init-token-embeddings-from: no such checkpoint: {path}")
    state = checkpoint_utils.load_checkpoint_to_cpu(path)
    if TOKEN_EMBEDDING_KEY not in state["model"]:
        raise OptionError(
            f"--init-token-embeddings-from {path}: no {TOKEN_EMBEDDING_KEY} in the checkpoint "
            "(not a RoBERTa model?)")
    return state["model"][TOKEN_EMBEDDING_KEY]


def _register(name, layers, hidden, heads, ffn):
    @register_model_architecture("taco_roberta", name)
    def architecture(args):
        args.encoder_layers = safe_getattr(args, "encoder_layers", layers)
        args.encoder_embed_dim = safe_getattr(args, "encoder_embed_dim", hidden)
        args.encoder_attention_heads = safe_getattr(args, "encoder_attention_heads", heads)
        args.encoder_ffn_embed_dim = safe_getattr(args, "encoder_ffn_embed_dim", ffn)
        base_architecture(args)

    architecture.__name__ = f"{name}_architecture"


register_model_architecture("taco_roberta", "taco_roberta")(base_architecture)
for _name, _size in SIZES.items():
    _register(_name, *_size)
