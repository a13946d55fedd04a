"""Load a TACO (or any fairseq RoBERTa) checkpoint in one call, with its SentencePiece model.

:func:`from_pretrained` returns fairseq's own ``RobertaHubInterface`` (in eval mode) whose BPE is
the data-bin's ``sentencepiece.bpe.model`` instead of fairseq's GPT-2 default (which downloads
``encoder.json``/``vocab.bpe``)::

    import taco_fairseq.hub
    roberta = taco_fairseq.hub.from_pretrained("checkpoints/taco_small/checkpoint_best.pt")
    tokens = roberta.encode("Hello world")              # [tokens] LongTensor, <s> ... </s>
    features = roberta.extract_features(tokens)         # [1, tokens, hidden]
    layers = roberta.extract_features(tokens, return_all_hiddens=True)
                                                        # layers + 1 tensors [1, tokens, hidden]
    roberta.fill_mask("The capital of France is <mask>.", topk=3)
                                                        # [(filled text, probability, token)]

A GLUE fine-tuned checkpoint (fairseq's ``sentence_prediction``) loads alike, with ``predict``
for its classification head; it keeps its pre-training LM head, so ``fill_mask`` works too.
"""

from pathlib import Path
from typing import Optional, Union

import torch
from fairseq import checkpoint_utils, utils
from fairseq.models.roberta import RobertaHubInterface

from . import register
from .metadata import (INFO_FILE, SENTENCEPIECE_MODEL, check_training_data, load_lazily,
                       load_task_dictionary, recorded_data_dir, recorded_pretraining_data,
                       saved_option)

PathLike = Union[str, Path]

#: Tried in this order when :func:`from_pretrained` is given a directory.
CHECKPOINT_NAMES = ("checkpoint_best.pt", "checkpoint_last.pt", "model.pt")
#: Where a task's dictionary lies in its data directory (default: ``dict.txt`` at the top).
_DICT_DIRS = {"sentence_prediction": "input0"}


def resolve_checkpoint(checkpoint: PathLike) -> Path:
    """The checkpoint file meant by a file or a save directory.

    A directory means the first of :data:`CHECKPOINT_NAMES` it holds.

    Raises:
        FileNotFoundError: if the path does not exist or the directory holds none of them
            (the message lists the ``.pt`` files it has).
    """
    path = Path(checkpoint)
    if path.is_file():
        return path
    if path.is_dir():
        for name in CHECKPOINT_NAMES:
            if (path / name).is_file():
                return path / name
        found = sorted(p.name for p in path.glob("*.pt"))
        raise FileNotFoundError(
            f"{path} holds none of {', '.join(CHECKPOINT_NAMES)}; pass a checkpoint file "
            f"(.pt files there: {', '.join(found) or 'none'})"
        )
    raise FileNotFoundError(f"checkpoint not found: {path}")


class TacoHubInterface(RobertaHubInterface):
    """fairseq's ``RobertaHubInterface`` with a :meth:`fill_mask` that returns the ``topk``
    best fillings with their own probabilities.

    fairseq's ``fill_mask`` turns the top-k token ids into one string with
    ``Dictionary.string``, which drops ``</s>``; the remaining fillings are then paired with the
    probabilities of the wrong ranks and fewer than ``topk`` come back.
    """

    MASK = "<mask>"

    def fill_mask(self, masked_input: str, topk: int = 5):
        """The ``topk`` most probable tokens at the one ``<mask>`` of ``masked_input``.

        Args:
            masked_input: raw text with exactly one ``<mask>``.
            topk: how many fillings, 1 .. vocabulary size.

        Returns:
            ``topk`` tuples ``(filled text, probability, token text)``, most probable first;
            special symbols (``</s>``, ...) come back as their symbol.

        Raises:
            ValueError: if the text does not hold exactly one ``<mask>`` or ``topk`` is out of
                range.
        """
        if masked_input.count(self.MASK) != 1:
            raise ValueError(
                f"fill_mask needs exactly one {self.MASK} in the text, got "
                f"{masked_input.count(self.MASK)}: {masked_input!r}"
            )
        dictionary = self.task.source_dictionary
        if not 1 <= topk <= len(dictionary):
            raise ValueError(f"topk must be in 1..{len(dictionary)}, got {topk}")
        mask_idx = dictionary.index(self.MASK)  # added by masked_lm and sentence_prediction
        spans = [self.bpe.encode(span.rstrip()) for span in masked_input.split(self.MASK)]
        line = "<s> " + f" {self.MASK} ".join(spans).strip() + " </s>"
        tokens = dictionary.encode_line(line, append_eos=False, add_if_not_exist=False).long()
        with utils.model_eval(self.model), torch.no_grad():
            logits, _ = self.model(tokens.unsqueeze(0).to(self.device))
        probabilities = logits[0, tokens.eq(mask_idx).to(self.device)][0].softmax(-1)
        values, indices = probabilities.topk(topk)
        # the mask and the space before it become the filling (SentencePiece marks a word
        # start with U+2581), as fairseq's fill_mask does
        target = f" {self.MASK}" if f" {self.MASK}" in masked_input else self.MASK
        fillings = []
        for probability, index in zip(values.tolist(), indices.tolist()):
            piece = dictionary[index]
            text = self.bpe.decode(piece)
            if piece.startswith("\u2581"):
                text = " " + text
            fillings.append((masked_input.replace(target, text), probability, text))
        return fillings


def default_sentencepiece_model(data_dir: Path) -> Path:
    """The SentencePiece model of the data directory ``data_dir``: its own
    ``sentencepiece.bpe.model`` (a pre-training data-bin), else that of the pre-training
    data-bin that its ``prep_info.json`` records (a GLUE task directory of
    ``taco-prepare-glue``).

    Raises:
        FileNotFoundError: neither exists; the message names where it looked and what to pass.
    """
    own = data_dir / SENTENCEPIECE_MODEL
    if own.is_file():
        return own
    recorded = recorded_pretraining_data(data_dir)
    if recorded and (Path(recorded) / SENTENCEPIECE_MODEL).is_file():
        return Path(recorded) / SENTENCEPIECE_MODEL
    where = (f"nor in the pre-training data-bin {recorded} that its {INFO_FILE} records"
             if recorded else "(a GLUE task directory?)")
    raise FileNotFoundError(
        f"no {SENTENCEPIECE_MODEL} in {data_dir} {where}: pass the pre-training data-bin's "
        "model (sentencepiece_model= in Python, --sentencepiece-model of taco-export-hf)")


def from_pretrained(
    checkpoint: PathLike,
    data_dir: Optional[PathLike] = None,
    sentencepiece_model: Optional[PathLike] = None,
) -> TacoHubInterface:
    """Load a fairseq RoBERTa checkpoint (``taco_masked_lm``, ``masked_lm`` or a fine-tuned
    ``sentence_prediction`` one) with the SentencePiece BPE, in eval mode, on the CPU.
    Fine-tuning keeps the pre-training LM head (``fill_mask``): fairseq's RoBERTa saves it with
    every checkpoint, unchanged by fine-tuning but for the token embeddings it shares.

    Args:
        checkpoint: a checkpoint file, or a save directory (:func:`resolve_checkpoint`).
        data_dir: the data-bin whose ``dict.txt`` the model was trained with (for
            ``sentence_prediction``: the task directory with ``input0/``); default: the one
            recorded in the checkpoint (:func:`taco_fairseq.metadata.recorded_data_dir`).
        sentencepiece_model: default: ``data_dir/sentencepiece.bpe.model``, else (a GLUE task
            directory) the pre-training data-bin's that ``data_dir/prep_info.json`` records
            (:func:`default_sentencepiece_model`).

    Returns:
        a :class:`TacoHubInterface` (fairseq's ``RobertaHubInterface``): ``encode(text, *more_texts)`` -> ``[tokens]``,
        ``extract_features(tokens, return_all_hiddens=False)`` -> ``[batch, tokens, hidden]``
        (a list of ``layers + 1`` such tensors with ``return_all_hiddens``), ``fill_mask(text,
        topk)`` on text with one ``<mask>``, ``predict(head, tokens)`` for classification heads.
        ``.cuda()`` moves it to the GPU.

    Raises:
        FileNotFoundError: if the checkpoint, the data directory, its ``dict.txt`` or the
            SentencePiece model is missing; the message names the argument to pass.
        ValueError: if the data directory's dictionary or the SentencePiece model is not the
            one the checkpoint was trained with
            (:func:`taco_fairseq.metadata.check_training_data`; the message names both).
    """
    register()  # the checkpoint may name the plugin's task, criteria and architectures
    checkpoint = resolve_checkpoint(checkpoint)
    state = load_lazily(checkpoint)
    if data_dir is None:
        recorded = recorded_data_dir(checkpoint, state)
        if recorded is None or not Path(recorded).is_dir():
            raise FileNotFoundError(
                f"{checkpoint} was trained on data directory {recorded}, which does not exist "
                "here (a relative one was looked for beside the checkpoint, in its parent "
                "directories and in the current directory); give the data-bin with the model's "
                "dict.txt (data_dir= in Python, --data for taco-export-hf)"
            )
        data_dir = recorded
    data_dir = Path(data_dir).resolve()
    if not data_dir.is_dir():
        raise FileNotFoundError(f"data_dir not found: {data_dir}")
    if sentencepiece_model is None:
        sentencepiece_model = default_sentencepiece_model(data_dir)
    elif not Path(sentencepiece_model).is_file():
        raise FileNotFoundError(f"sentencepiece_model not found: {sentencepiece_model}")
    sentencepiece_model = Path(sentencepiece_model).resolve()
    task = (saved_option(state, "task", "_name")  # cfg.task._name, or args.task
            or saved_option(state, "task", "task"))
    dict_file = data_dir / _DICT_DIRS.get(task, "") / "dict.txt"
    if not dict_file.is_file():
        raise FileNotFoundError(f"no {dict_file.relative_to(data_dir)} in {data_dir}; pass "
                                "data_dir= (the data-bin with the model's dict.txt)")
    check_training_data(checkpoint, state, load_task_dictionary(dict_file), str(dict_file),
                        sentencepiece_model)
    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(checkpoint)],
        arg_overrides={
            "data": str(data_dir),
            "bpe": "sentencepiece",
            "sentencepiece_model": str(sentencepiece_model),
            "load_checkpoint_heads": True,
            "init_token_embeddings_from": None,  # the weights come from the checkpoint
        },
    )
    return TacoHubInterface(cfg, task, models[0]).eval()
