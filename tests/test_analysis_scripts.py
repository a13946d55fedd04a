"""The analysis commands end to end on real checkpoints and text: CSVs and PNGs."""

import csv
import re

import matplotlib.image
import pytest

from conftest import SHARED, run_fairseq, run_script, train_args
from taco_fairseq.analysis.wordsim import distinct_pairs, load_wordsim353, select_pairs

#: The analysis commands in subprocesses, on fairseq-train runs.
pytestmark = pytest.mark.slow

WORDSIM = SHARED / "data" / "wordsim353" / "combined.tsv"


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _image(path):
    image = matplotlib.image.imread(path)
    assert image.shape[0] > 200 and image.shape[1] > 300
    assert image.std() > 0.01  # not blank
    return image


@pytest.fixture(scope="module")
def mlm_run(tiny_databin, tmp_path_factory):
    """A 4-update MLM run (criterion mlm) with checkpoints at 2 and 4 and its log as
    RUN/train.log."""
    run = tmp_path_factory.mktemp("mlm_run")
    out = run_fairseq("fairseq-train", *train_args(
        tiny_databin, run / "checkpoints", "--task", "masked_lm", "--criterion", "mlm",
        "--max-update", "4", "--save-interval-updates", "2", "--log-interval", "1",
        "--validate-interval-updates", "2", "--max-valid-steps", "2"))
    (run / "train.log").write_text(out.stdout)
    return run


def test_contextual_score_command(trained_checkpoint, mlm_run, tiny_databin, wikitext_test,
                                  tmp_path):
    result = run_script(
        "contextual_score.py", trained_checkpoint, mlm_run, "--data-bin", tiny_databin,
        "--corpus", wikitext_test, "--max-lines", "300", "--sentences", "50",
        "--batch-size", "16", "--device", "cpu", "--output", tmp_path / "score.csv",
        "--plot", tmp_path / "score.png",
    )
    assert result.returncode == 0, result.stderr
    rows = _rows(tmp_path / "score.csv")
    assert [(r["run"], int(r["updates"])) for r in rows] == [
        (trained_checkpoint.name, 10), (trained_checkpoint.name, 20),
        (mlm_run.name, 2), (mlm_run.name, 4)]
    for row in rows:
        assert float(row["cosine_gap"]) == pytest.approx(
            float(row["cosine_intra"]) - float(row["cosine_inter"]))
        assert int(row["pairs"]) > 500
    _image(tmp_path / "score.png")


@pytest.mark.skipif(not WORDSIM.is_file(), reason=f"no {WORDSIM}")
def test_embedding_similarity_command(trained_checkpoint, tiny_databin, tmp_path):
    result = run_script(
        "embedding_similarity.py", trained_checkpoint, "--data-bin", tiny_databin,
        "--wordsim", WORDSIM, "--top", "10", "--device", "cpu",
        "--output", tmp_path / "sim.csv", "--plot", tmp_path / "sim.png",
    )
    assert result.returncode == 0, result.stderr
    summary, pairs = _rows(tmp_path / "sim.csv"), _rows(tmp_path / "sim_pairs.csv")
    assert [int(r["updates"]) for r in summary] == [10, 20]
    assert all(r["pairs"] == "10" for r in summary)
    top = select_pairs(distinct_pairs(load_wordsim353(WORDSIM)), top=10)
    assert [(r["word1"], r["word2"]) for r in pairs] == [p[:2] for p in top] * 2
    _image(tmp_path / "sim.png")
    for row in pairs:
        assert -1 <= float(row["cosine"]) <= 1

    bad = run_script("embedding_similarity.py", tmp_path, "--wordsim", WORDSIM,
                     "--output", tmp_path / "x.csv")
    assert bad.returncode == 2 and "no checkpoint*.pt" in bad.stderr


@pytest.mark.skipif(not WORDSIM.is_file(), reason=f"no {WORDSIM}")
def test_a_sample_of_more_pairs_than_available_measures_all_and_says_so(
        trained_checkpoint, tiny_databin, tmp_path):
    result = run_script(
        "embedding_similarity.py", trained_checkpoint, "--data-bin", tiny_databin,
        "--wordsim", WORDSIM, "--sample", "1000", "--device", "cpu",
        "--output", tmp_path / "sim.csv",
    )
    assert result.returncode == 0, result.stderr
    distinct = len(distinct_pairs(load_wordsim353(WORDSIM)))
    skipped = int(re.search(r"(\d+) skipped\)$", result.stdout.strip()).group(1))
    available = distinct - skipped
    assert [int(r["pairs"]) for r in _rows(tmp_path / "sim.csv")] == [available] * 2
    warning = (f"--sample 1000: only {available} word pairs are available ({distinct} "
               f"distinct pairs in {WORDSIM}, {skipped} of them skipped for unknown words); all "
               f"{available} are measured")
    assert [line for line in result.stderr.splitlines()
            if " | WARNING | " in line and line.endswith(warning)], result.stderr


def test_own_pairs_need_no_wordsim_file(trained_checkpoint, tiny_databin, tmp_path):
    """The human scores of WordSim353 only fill in the human_score column of --pairs."""
    listed = tmp_path / "pairs.txt"
    listed.write_text("king queen\ncity town\n")
    result = run_script(
        "embedding_similarity.py", trained_checkpoint, "--data-bin", tiny_databin,
        "--pairs", listed, "--device", "cpu", "--output", tmp_path / "own.csv",
    )
    assert result.returncode == 0, result.stderr
    pairs = _rows(tmp_path / "own_pairs.csv")
    assert [(r["word1"], r["word2"]) for r in pairs] == [("king", "queen"), ("city", "town")] * 2
    assert all(r["human_score"] == "nan" and -1 <= float(r["cosine"]) <= 1 for r in pairs)


@pytest.mark.parametrize("script, options", [
    ("embedding_similarity.py", ["--output", "sim.csv"]),
    ("learning_dynamics.py", ["--corpus", "missing.txt", "--output-dir", "out"]),
])
def test_pairs_to_choose_from_need_wordsim(tmp_path, script, options):
    """Without --pairs the pairs come from --wordsim; learning_dynamics says so before reading
    the corpus of the (long) contextual score (nothing is written: the error comes first)."""
    result = run_script(script, tmp_path, *options)
    assert result.returncode == 2
    assert ("error: --wordsim FILE is needed: the pairs of --sample (the default), --top and "
            "--all-pairs are chosen from it; give it, or your own pairs with --pairs FILE"
            ) in result.stderr


@pytest.mark.skipif(not WORDSIM.is_file(), reason=f"no {WORDSIM}")
def test_learning_dynamics_command(trained_checkpoint, mlm_run, tiny_databin, wikitext_test,
                                   tmp_path):
    out = tmp_path / "figures"
    out.mkdir()
    (out / "stale.txt").write_text("an earlier file\n")  # not written now: not reported
    result = run_script(
        "learning_dynamics.py", mlm_run, trained_checkpoint, "--data-bin", tiny_databin,
        "--corpus", wikitext_test, "--max-lines", "200", "--sentences", "30",
        "--wordsim", WORDSIM, "--device", "cpu", "--output-dir", out,
    )
    assert result.returncode == 0, result.stderr
    written = ["contextual_score.csv", "contextual_score.png", "embedding_similarity.csv",
               "embedding_similarity.png", "embedding_similarity_pairs.csv", "intra_inter.png",
               "online_context_similarity.png"]
    assert sorted(line.split("/")[-1] for line in result.stdout.splitlines()
                  if line.startswith("wrote ")) == written
    assert sorted(p.name for p in out.iterdir()) == sorted(written + ["stale.txt"])
    for png in out.glob("*.png"):
        _image(png)
    assert {r["run"] for r in _rows(out / "embedding_similarity.csv")} == {
        mlm_run.name, trained_checkpoint.name}
