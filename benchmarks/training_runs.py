"""The training command lines the benchmark compares, and the data they read.

Both criteria run the BERT-small recipe of ``README.md`` (Adam, lr 1e-4, weight decay 0.01,
clip-norm 1.0, polynomial decay) on the same data-bin, model and batches; they differ only in
``--task``/``--criterion`` (and TACO's ``--tc-negatives``).
"""

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Sequence

from taco_fairseq.prep.pretraining import (
    INFO_FILE,
    PrepareOptions,
    prepare_pretraining_data,
)

USER_DIR = str(Path(__file__).resolve().parents[1] / "taco_fairseq")  # for --user-dir

#: Run names, in the order they are reported.
MASKED_LM, TACO = "masked_lm", "taco"


@dataclass(frozen=True)
class Shape:
    """A model and batch shape to time.

    Attributes:
        name: what the tables call it.
        arch: fairseq ``--arch``.
        tokens_per_sample: ``--tokens-per-sample`` (tokens per sequence).
        batch_size: ``--batch-size`` (sequences per batch).
        hidden: the architecture's hidden size.
        negatives: K, ``--tc-negatives``.
    """

    name: str
    arch: str
    tokens_per_sample: int
    batch_size: int
    hidden: int
    negatives: int = 50


#: tiny: the test suite's model; small: the paper's BERT-small (TACO §4); base: BERT-base.
SHAPES: Dict[str, Shape] = {
    shape.name: shape
    for shape in (
        Shape("tiny", "roberta_tiny", 128, 16, 128),
        Shape("small", "roberta_small", 256, 16, 512),
        Shape("base", "roberta_base", 256, 16, 768),
    )
}


def training_argv(data: Path, shape: Shape, device: str, fp16: bool = False) -> Dict[str, List[str]]:
    """The ``fairseq-train`` command lines (without the program name) of both runs.

    Args:
        data: the data-bin directory.
        shape: model and batch shape.
        device: ``"cpu"`` (adds ``--cpu``) or ``"cuda"``.
        fp16: add ``--fp16``.

    Returns:
        {``"masked_lm"``: ..., ``"taco"``: ...}.
    """
    common = [
        str(data), "--user-dir", USER_DIR, "--arch", shape.arch,
        "--tokens-per-sample", str(shape.tokens_per_sample),
        "--batch-size", str(shape.batch_size),
        "--optimizer", "adam", "--adam-betas", "(0.9,0.999)", "--adam-eps", "1e-6",
        "--weight-decay", "0.01", "--clip-norm", "1.0", "--lr", "1e-4",
        "--lr-scheduler", "polynomial_decay", "--warmup-updates", "2500",
        "--total-num-update", "250000", "--max-update", "250000",
        "--seed", "1", "--num-workers", "0", "--disable-validation", "--no-save",
    ]
    if device == "cpu":
        common.append("--cpu")
    if fp16:
        common.append("--fp16")
    return {
        MASKED_LM: common + ["--task", "masked_lm", "--criterion", "masked_lm"],
        TACO: common + [
            "--task", "taco_masked_lm", "--criterion", "taco",
            "--tc-negatives", str(shape.negatives),
        ],
    }


def ensure_data(destdir: Path, text: Sequence[Path], max_lines: int, vocab_size: int) -> Path:
    """Prepare a data-bin from ``text`` into ``destdir`` unless one made from the same inputs
    and options is already there (see :func:`taco_fairseq.prep.pretraining.prepare_pretraining_data`).

    Args:
        destdir: output directory (reused across benchmark runs).
        text: raw text files (plain, .xz, .gz).
        max_lines: lines read per file.
        vocab_size: SentencePiece vocabulary size.

    Returns:
        ``destdir``.

    Raises:
        FileNotFoundError: if a text file is missing.
    """
    missing = [str(path) for path in text if not Path(path).is_file()]
    if missing:
        raise FileNotFoundError(
            f"benchmark text not found: {', '.join(missing)}; give existing files with --text "
            "or a prepared data-bin with --data"
        )
    options = PrepareOptions(
        destdir=Path(destdir), train=[Path(p) for p in text], valid_docs=5,
        vocab_size=vocab_size, max_lines=max_lines, num_threads=2, workers=2, force=True,
    )
    info = Path(destdir) / INFO_FILE
    if info.is_file():
        saved = json.loads(info.read_text())["options"]
        if (
            saved["train"] == [str(p) for p in options.train]
            and saved["max_lines"] == max_lines
            and saved["vocab_size"] == vocab_size
        ):
            return Path(destdir)
    prepare_pretraining_data(options)
    return Path(destdir)
