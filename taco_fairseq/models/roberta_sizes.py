"""RoBERTa architectures at the BERT miniature sizes (Turc et al., 2019).

``roberta_small`` is the paper's BERT-small (L=4, H=512, A=8, FFN 2048). All sizes keep
fairseq's RoBERTa defaults otherwise (learned positions, post-norm, tied input/output
embeddings unless ``--untie-weights-roberta``). ``safe_getattr`` keeps the values a hydra config
or the command line sets.
"""

from fairseq.models import register_model_architecture
from fairseq.models.roberta.model import base_architecture
from fairseq.utils import safe_getattr

#: name -> (layers, hidden, attention heads, FFN hidden)
SIZES = {
    "roberta_tiny": (2, 128, 2, 512),
    "roberta_mini": (4, 256, 4, 1024),
    "roberta_small": (4, 512, 8, 2048),
    "roberta_medium": (8, 512, 8, 2048),
}


def _register(name, layers, hidden, heads, ffn):
    @register_model_architecture("roberta", name)
    def architecture(args):
        args.encoder_layers = safe_getattr(args, "encoder_layers", layers)
        args.encoder_embed_dim = safe_getattr(args, "encoder_embed_dim", hidden)
        args.encoder_attention_heads = safe_getattr(args, "encoder_attention_heads", heads)
        args.encoder_ffn_embed_dim = safe_getattr(args, "encoder_ffn_embed_dim", ffn)
        base_architecture(args)

    architecture.__name__ = f"{name}_architecture"
    return architecture


for _name, _size in SIZES.items():
    _register(_name, *_size)
