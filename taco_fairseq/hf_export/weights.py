"""fairseq RoBERTa → transformers RoBERTa: configuration and weights.

fairseq's ``RobertaModel`` (post-norm, learned positions, LayerNorm after the embeddings) is the
same network as transformers' ``RobertaModel``; only names differ:

==============================================  ==============================================
fairseq (``encoder.sentence_encoder.`` ...)     transformers (``roberta.`` ...)
==============================================  ==============================================
``embed_tokens``                                ``embeddings.word_embeddings``
``embed_positions``                             ``embeddings.position_embeddings``
``layernorm_embedding``                         ``embeddings.LayerNorm``
``layers.i.self_attn.{q,k,v}_proj``             ``encoder.layer.i.attention.self.{query,key,value}``
``layers.i.self_attn.out_proj``                 ``encoder.layer.i.attention.output.dense``
``layers.i.self_attn_layer_norm``               ``encoder.layer.i.attention.output.LayerNorm``
``layers.i.fc1`` / ``fc2``                      ``encoder.layer.i.intermediate.dense`` / ``output.dense``
``layers.i.final_layer_norm``                   ``encoder.layer.i.output.LayerNorm``
``encoder.lm_head.{dense,layer_norm,bias}``     ``lm_head.{dense,layer_norm,bias}``
``encoder.lm_head.weight``                      ``lm_head.decoder.weight`` (tied to the input
                                                embeddings unless ``--untie-weights-roberta``)
``classification_heads.NAME.{dense,out_proj}``  ``classifier.{dense,out_proj}``
==============================================  ==============================================

Positions: fairseq's learned positions number the tokens ``padding_idx + 1, padding_idx + 2, ...``
(``fairseq.utils.make_positions``), exactly as transformers' ``RobertaEmbeddings``, so the table
is copied as is and ``max_position_embeddings = max_positions + padding_idx + 1``
(``max_positions + 2`` with ``<pad>`` = 1). transformers' token-type embedding (one type) is zero.
Both LM heads compute ``decoder(LayerNorm(gelu(dense(h)))) + bias``.
"""

import re
from typing import Dict, Mapping, Optional

import torch
from transformers import RobertaConfig, RobertaForMaskedLM, RobertaForSequenceClassification

#: fairseq model options this conversion requires: option -> (value, why).
REQUIRED_OPTIONS = {
    "encoder_normalize_before": (False, "transformers' RoBERTa is post-norm"),
    "layernorm_embedding": (True, "transformers' RoBERTa normalizes the embeddings"),
    "no_scale_embedding": (True, "transformers' RoBERTa does not scale the embeddings"),
    "encoder_learned_pos": (True, "transformers' RoBERTa has learned positions"),
    "no_token_positional_embeddings": (False, "transformers' RoBERTa adds positions"),
    "activation_fn": ("gelu", "transformers' RoBERTa LM head applies exact (erf) gelu"),
    "adaptive_input": (False, "transformers' RoBERTa has a plain embedding table"),
    "encoder_layers_to_keep": (None, "transformers' RoBERTa has no layer pruning"),
    "quant_noise_pq": (0, "transformers' RoBERTa has no quantization noise"),
}
#: Further options a classification head requires.
REQUIRED_HEAD_OPTIONS = {
    "pooler_activation_fn": ("tanh", "transformers' RoBERTa classification head applies tanh"),
    "spectral_norm_classification_head": (False, "its head is a plain Linear"),
}

_LAYER_NAMES = {
    "self_attn.q_proj": "attention.self.query",
    "self_attn.k_proj": "attention.self.key",
    "self_attn.v_proj": "attention.self.value",
    "self_attn.out_proj": "attention.output.dense",
    "self_attn_layer_norm": "attention.output.LayerNorm",
    "fc1": "intermediate.dense",
    "fc2": "output.dense",
    "final_layer_norm": "output.LayerNorm",
}
_EMBEDDING_NAMES = {
    "embed_tokens": "embeddings.word_embeddings",
    "embed_positions": "embeddings.position_embeddings",
    "layernorm_embedding": "embeddings.LayerNorm",
}
_ENCODER = "encoder.sentence_encoder."
_LAYER_KEY = re.compile(r"layers\.(\d+)\.(.+)\.(weight|bias)$")
_HEAD_KEY = re.compile(r"classification_heads\.([^.]+)\.(dense|out_proj)\.(weight|bias)$")
_LM_HEAD_NAMES = {
    "encoder.lm_head.dense.weight": "lm_head.dense.weight",
    "encoder.lm_head.dense.bias": "lm_head.dense.bias",
    "encoder.lm_head.layer_norm.weight": "lm_head.layer_norm.weight",
    "encoder.lm_head.layer_norm.bias": "lm_head.layer_norm.bias",
    "encoder.lm_head.weight": "lm_head.decoder.weight",
    "encoder.lm_head.bias": "lm_head.bias",
}


def check_convertible(args, *, classification: bool = False) -> None:
    """Check that a fairseq RoBERTa's options describe transformers' RoBERTa.

    Args:
        args: the model's options (``model.args`` of a fairseq ``RobertaModel``).
        classification: also check the classification head's options.

    Raises:
        ValueError: listing every option (``--encoder-normalize-before``, ...) whose value
            transformers' RoBERTa cannot reproduce, with the required value and why.
    """
    required_options = dict(REQUIRED_OPTIONS, **(REQUIRED_HEAD_OPTIONS if classification else {}))
    problems = []
    for name, (required, why) in required_options.items():
        value = getattr(args, name, required)
        if value != required:
            problems.append(f"--{name.replace('_', '-')} is {value!r}, needs {required!r} ({why})")
    if problems:
        raise ValueError(
            "this fairseq model cannot be exported to transformers' RoBERTa:\n  "
            + "\n  ".join(problems)
        )


def roberta_config(
    args,
    vocab_size: int,
    padding_idx: int,
    max_position_embeddings: int,
    *,
    num_labels: Optional[int] = None,
    regression: bool = False,
    id2label: Optional[Mapping[int, str]] = None,
) -> RobertaConfig:
    """The transformers configuration of a fairseq RoBERTa.

    Args:
        args: the model's options (``model.args``); :func:`check_convertible` must pass.
        vocab_size: rows of the embedding table (fairseq dictionary incl. ``<mask>``).
        padding_idx: fairseq's ``<pad>`` id (1).
        max_position_embeddings: rows of the position table (``max_positions + 2``).
        num_labels: outputs of the classification head (``None``: masked LM).
        regression: the head predicts a score (``problem_type="regression"``, STS-B).
        id2label: class index -> label name, for classification.
    """
    config = RobertaConfig(
        vocab_size=vocab_size,
        hidden_size=args.encoder_embed_dim,
        num_hidden_layers=args.encoder_layers,
        num_attention_heads=args.encoder_attention_heads,
        intermediate_size=args.encoder_ffn_embed_dim,
        hidden_act="gelu",
        hidden_dropout_prob=args.dropout,
        attention_probs_dropout_prob=args.attention_dropout,
        classifier_dropout=args.pooler_dropout,
        max_position_embeddings=max_position_embeddings,
        type_vocab_size=1,
        layer_norm_eps=1e-5,  # fairseq's LayerNorm
        pad_token_id=padding_idx,
        bos_token_id=0,
        eos_token_id=2,
        tie_word_embeddings=not args.untie_weights_roberta,
    )
    if num_labels is None:
        config.architectures = [RobertaForMaskedLM.__name__]
    else:
        config.architectures = [RobertaForSequenceClassification.__name__]
        config.num_labels = num_labels
        config.problem_type = "regression" if regression else "single_label_classification"
        if id2label is not None:
            config.id2label = dict(id2label)
            config.label2id = {label: index for index, label in id2label.items()}
    return config


def convert_state_dict(
    state: Mapping[str, torch.Tensor],
    *,
    hidden_size: int,
    classification_head: Optional[str] = None,
) -> Dict[str, torch.Tensor]:
    """Rename a fairseq RoBERTa state dict to transformers' names (see the module doc).

    Args:
        state: ``model.state_dict()`` of a fairseq ``RobertaModel``.
        hidden_size: H, for the zero token-type embedding ``[1, H]``.
        classification_head: name of the fairseq classification head to export as
            ``classifier`` (for ``RobertaForSequenceClassification``; the LM head is then
            dropped); ``None`` exports the LM head (``RobertaForMaskedLM``).

    Returns:
        transformers' state dict (tensors shared with ``state``).

    Raises:
        KeyError: if ``state`` has a key this mapping does not know (the message names it),
            or lacks the requested head.
    """
    converted = {}
    for key, tensor in state.items():
        name = _hf_name(key, classification_head)
        if name is not None:
            converted[name] = tensor
    if classification_head is None:
        converted["lm_head.decoder.bias"] = converted["lm_head.bias"]
    elif "classifier.out_proj.weight" not in converted:
        heads = sorted({m.group(1) for m in map(_HEAD_KEY.match, state) if m})
        raise KeyError(
            f"the checkpoint has no classification head {classification_head!r} "
            f"(it has: {', '.join(heads) or 'none'})"
        )
    reference = converted["roberta.embeddings.word_embeddings.weight"]
    converted["roberta.embeddings.token_type_embeddings.weight"] = reference.new_zeros(
        1, hidden_size
    )
    return converted


def _hf_name(key: str, classification_head: Optional[str]) -> Optional[str]:
    """transformers' name of a fairseq key; ``None`` for keys that are not exported."""
    if key.startswith(_ENCODER):
        rest = key[len(_ENCODER):]
        if rest == "version":
            return None
        module, _, param = rest.rpartition(".")
        if module in _EMBEDDING_NAMES:
            return f"roberta.{_EMBEDDING_NAMES[module]}.{param}"
        layer = _LAYER_KEY.match(rest)
        if layer and layer.group(2) in _LAYER_NAMES:
            index, module, param = layer.groups()
            return f"roberta.encoder.layer.{index}.{_LAYER_NAMES[module]}.{param}"
    elif key in _LM_HEAD_NAMES:
        return _LM_HEAD_NAMES[key] if classification_head is None else None
    else:
        head = _HEAD_KEY.match(key)
        if head:
            name, module, param = head.groups()
            return f"classifier.{module}.{param}" if name == classification_head else None
    raise KeyError(f"fairseq parameter {key!r} has no transformers RoBERTa counterpart")


def to_transformers(
    model,
    *,
    classification_head: Optional[str] = None,
    regression: bool = False,
    id2label: Optional[Mapping[int, str]] = None,
):
    """Build the transformers model holding a fairseq RoBERTa's weights (fp32, eval mode).

    Args:
        model: a fairseq ``RobertaModel``.
        classification_head: export this classification head as
            ``RobertaForSequenceClassification``; ``None``: ``RobertaForMaskedLM``.
        regression: the head predicts one score (STS-B).
        id2label: class index -> label name.

    Raises:
        ValueError: if the model's options are not convertible (:func:`check_convertible`)
            or tied input/output embeddings differ.
        KeyError: from :func:`convert_state_dict`.
        RuntimeError: if transformers' model misses or does not expect a converted weight.
    """
    args = model.args
    check_convertible(args, classification=classification_head is not None)
    state = {k: v.detach().float() for k, v in model.state_dict().items()}
    padding_idx = model.encoder.sentence_encoder.padding_idx
    vocab_size = state[_ENCODER + "embed_tokens.weight"].size(0)
    positions = state[_ENCODER + "embed_positions.weight"].size(0)
    if positions != args.max_positions + padding_idx + 1:
        raise ValueError(
            f"the position table has {positions} rows, expected --max-positions "
            f"{args.max_positions} + padding_idx {padding_idx} + 1"
        )
    if not args.untie_weights_roberta and not torch.equal(
        state["encoder.lm_head.weight"], state[_ENCODER + "embed_tokens.weight"]
    ):
        raise ValueError(
            "the model says its input and output embeddings are tied (no "
            "--untie-weights-roberta) but encoder.lm_head.weight differs from embed_tokens"
        )
    converted = convert_state_dict(
        state, hidden_size=args.encoder_embed_dim, classification_head=classification_head
    )
    if classification_head is None:
        num_labels, hf_class = None, RobertaForMaskedLM
    else:
        num_labels = converted["classifier.out_proj.weight"].size(0)
        hf_class = RobertaForSequenceClassification
    config = roberta_config(
        args, vocab_size, padding_idx, positions, num_labels=num_labels, regression=regression,
        id2label=id2label,
    )
    hf_model = hf_class(config)
    hf_model.load_state_dict(converted, strict=True)
    return hf_model.eval()
