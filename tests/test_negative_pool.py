"""The negative pool of the recipes and documented command lines (examples/taco/README.md,
"Sequences per update"): the TACO recipes and multi-GPU commands draw negatives across workers,
the table of pools and distinct sequences there is what the sampler gives, and the all-gather
sizes of docs/reliability.md (section 2) are what the tensor sizes give."""

import re
import shlex

import numpy as np
import pytest
import torch

from conftest import RECIPES, REPO, compose_recipe
from taco_fairseq.comparison.objectives import objective_args
from taco_fairseq.distributed import global_negative_index
from taco_fairseq.sampling import SamplingOptions, sample_positions

#: the recipes' shape: sequences per update, tokens per sequence, GPUs of their update_freq
SEQUENCES_PER_UPDATE, TOKENS, RECIPE_GPUS = 1280, 256, 8
HIDDEN = {"BERT-small": 512, "BERT-base": 768}
K = 50
#: the page with the table of pools, and the one with the cost of the all-gather
EXAMPLES, RELIABILITY = REPO / "examples/taco/README.md", REPO / "docs/reliability.md"


def expected_distinct(others: int, k: int = K) -> float:
    """Expected number of distinct sequences among ``k`` negatives drawn uniformly with
    replacement from ``others`` equally long sequences: others · (1 − (1 − 1/others)^k), the
    expected number of occupied cells when k balls fall into ``others`` cells (the classical
    occupancy problem, Feller, *An Introduction to Probability Theory*, vol. 1, II.11)."""
    return others * (1 - (1 - 1 / others) ** k)


@pytest.mark.parametrize("path", sorted(p for p in RECIPES.glob("*_*.yaml")
                                        if not p.stem.startswith("bert_")),
                         ids=lambda p: p.stem)
def test_taco_recipes_draw_negatives_from_all_workers(path):
    cfg = compose_recipe(path.stem)
    if cfg.criterion._name != "taco":
        assert "tc_cross_worker_negatives" not in cfg.task  # masked_lm has no negatives
        return
    assert cfg.task.tc_cross_worker_negatives is True
    batch, update_freq = cfg.dataset.batch_size, cfg.optimization.update_freq[0]
    assert batch * update_freq * RECIPE_GPUS == SEQUENCES_PER_UPDATE
    assert batch * RECIPE_GPUS == 256  # the pool on the recipe's 8 GPUs


def test_the_comparison_reads_the_option_from_the_recipe():
    assert "--tc-cross-worker-negatives" in objective_args("taco")
    assert "--tc-cross-worker-negatives" not in objective_args("mlm")


def _fairseq_train_blocks(path):
    """The ``fairseq-train`` command lines of a markdown file's bash blocks, as words."""
    text = path.read_text(encoding="utf-8")
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for command in block.replace("\\\n", " ").splitlines():
            words = shlex.split(command)
            if "fairseq-train" in words or "fairseq_cli.train" in words:
                yield words


@pytest.mark.parametrize("path", [REPO / "README.md", EXAMPLES],
                         ids=lambda p: str(p.relative_to(REPO)))
def test_documented_multi_gpu_taco_commands_draw_negatives_from_all_workers(path):
    """Every TACO command line for GPUs (--fp16) with the recipes' 32 × 5 or a world size."""
    checked = 0
    for words in _fairseq_train_blocks(path):
        multi_gpu = "--fp16" in words and ("--distributed-world-size" in words
                                          or words[words.index("--update-freq") + 1] == "5")
        if "taco_masked_lm" in words and multi_gpu:
            assert "--tc-cross-worker-negatives" in words, " ".join(words)
            checked += 1
    assert checked >= 1


@pytest.mark.parametrize("sequences, workers", [(32, 1), (32, 8), (256, 8)])
def test_distinct_sequences_among_the_negatives_follow_the_formula(sequences, workers):
    """The sampler of one worker (``workers`` 1) or the cross-worker draw over ``workers``
    batches, on ``sequences`` rows of 8 tokens in all: the mean number of distinct rows among
    an anchor's K negatives is the occupancy formula's."""
    rng = np.random.default_rng(1)
    tokens = 8
    rows = sequences // workers
    candidate = np.ones((rows, tokens), dtype=bool)
    distinct = []
    for _ in range(4):
        if workers == 1:
            drawn = sample_positions(candidate, candidate, SamplingOptions(5, K), rng)
            row_of_negative = torch.from_numpy(drawn.negative // tokens)
        else:
            across = SamplingOptions(5, K, cross_worker=True)
            draws = [sample_positions(candidate, candidate, across, rng) for _ in range(workers)]
            sizes = [len(d.candidates) for d in draws]
            index = torch.cat([global_negative_index(
                torch.from_numpy(d.negative_uniform), torch.from_numpy(d.anchor_row_start),
                torch.from_numpy(d.anchor_row_length), sizes, rank)
                for rank, d in enumerate(draws)])
            row_of_negative = index // tokens  # rows of all workers, in rank order
        distinct += [len(set(r.tolist())) for r in row_of_negative]
    mean = float(np.mean(distinct))
    standard_error = float(np.std(distinct)) / len(distinct) ** 0.5
    assert abs(mean - expected_distinct(sequences - 1)) < 5 * standard_error + 0.02


def _pool_table():
    text = EXAMPLES.read_text(encoding="utf-8")
    match = re.search(r"<!-- negative-pool:.*?-->\n((?:\|.*\n)+)", text)
    assert match, "examples/taco/README.md lost its negative-pool table"
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in match.group(1).splitlines()[2:]]
    assert len(rows) >= 4
    return rows


def _number(text):
    return int(text.replace(",", ""))


def test_the_pool_table_is_what_the_sampler_gives():
    gpus_seen = set()
    for gpus, split, without, with_option, distinct in _pool_table():
        gpus, (batch, update_freq) = int(gpus), map(int, re.findall(r"\d+", split)[:2])
        gpus_seen.add(gpus)
        assert batch * update_freq * gpus == SEQUENCES_PER_UPDATE
        assert (_number(without), _number(with_option)) == (batch, batch * gpus)
        assert distinct == " → ".join(f"{expected_distinct(pool - 1):.1f}"
                                      for pool in (batch, batch * gpus))
    assert gpus_seen == {1, 8, 64}


def _all_gather_megabytes(gpus):
    """float32 vectors of the other workers' tokens, all steps of an update, per GPU."""
    return [(gpus - 1) / gpus * SEQUENCES_PER_UPDATE * TOKENS * h * 4 / 1e6
            for h in HIDDEN.values()]


def _cross_worker_section() -> str:
    """Section 2 of docs/reliability.md (the cross-worker negatives), white space folded."""
    text = RELIABILITY.read_text(encoding="utf-8")
    match = re.search(r"^## 2\. Cross-worker negatives.*?(?=^## )", text, re.M | re.S)
    assert match, "docs/reliability.md lost its section on cross-worker negatives"
    return " ".join(match.group(0).split())


def _numbers(text: str, unit: str) -> set:
    """The numbers written right before ``unit``, a regular expression (`` MB`` finds 587 in
    ``587 MB``, ``M\\b`` 28.7 in ``28.7M``, ``×`` 2.3 in ``2.3×``)."""
    return {float(n.replace(",", "")) for n in re.findall(rf"(\d[\d,]*(?:\.\d+)?){unit}", text)}


def test_the_all_gather_sizes_are_what_the_tensor_sizes_give():
    """The megabytes each GPU receives per update, on 8 and on 64 GPUs, stand in the section."""
    written = _numbers(_cross_worker_section(), " MB")
    for gpus in (8, 64):
        expected = {round(megabytes) for megabytes in _all_gather_megabytes(gpus)}
        assert expected <= written, (gpus, sorted(expected), sorted(written))


def _parameters(arch, vocabulary=30522):
    """Parameters of ``arch`` with the paper's vocabulary (and fairseq's ``<mask>``)."""
    from fairseq import options
    from fairseq.data import Dictionary
    from fairseq.models import ARCH_MODEL_REGISTRY

    dictionary = Dictionary()
    while len(dictionary) < vocabulary:
        dictionary.add_symbol(f"w{len(dictionary)}")
    dictionary.add_symbol("<mask>")
    task = type("Task", (), {"source_dictionary": dictionary, "dictionary": dictionary})
    args = options.parse_args_and_arch(options.get_training_parser(), [
        "/data", "--task", "masked_lm", "--arch", arch, "--tokens-per-sample", "256",
        "--max-positions", "256"])
    model = ARCH_MODEL_REGISTRY[arch].build_model(args, task)
    return sum(p.numel() for p in model.parameters())


def test_the_all_gather_is_compared_with_the_gradient_all_reduce():
    """docs/reliability.md gives the fp16 gradients' ring all-reduce on 8 GPUs (megabytes per
    update, from the parameter counts it gives) and its ratio to the negatives' all-gather."""
    section = _cross_worker_section()
    gpus = 8
    for arch, hidden in (("roberta_small", 512), ("roberta_base", 768)):
        parameters = _parameters(arch)
        all_reduce = 2 * (gpus - 1) / gpus * 2 * parameters / 1e6
        gather = (gpus - 1) / gpus * SEQUENCES_PER_UPDATE * TOKENS * hidden * 4 / 1e6
        assert round(parameters / 1e6, 1) in _numbers(section, r"M\b"), arch
        assert round(all_reduce) in _numbers(section, " MB"), arch
        ratio = gather / all_reduce
        assert {round(ratio), round(ratio, 1)} & _numbers(section, "×"), (arch, ratio)
