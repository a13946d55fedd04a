"""taco-compare: the objectives read from the recipes, and a toy comparison
end to end (roberta_tiny, tens of updates, one task) that resumes instead of redoing work."""

import csv
import dataclasses
import fcntl
import json
import re
import shlex
from pathlib import Path

import pytest

from taco_fairseq.comparison.objectives import (
    available_objectives,
    objective_args,
    shared_args,
)
from taco_fairseq.comparison.pretraining import (
    LOCK_FILE,
    PretrainRun,
    PretrainSettings,
    check_same_options,
    pretrain,
    pretrain_args,
    save_initialization,
)
from taco_fairseq.analysis.training_log import parse_json_log

from conftest import REPO, SHARED, run_script


def test_objectives_are_the_recipes():
    assert {"mlm", "taco", "mlm_tp", "taco_concentrated", "taco_untied"} <= set(
        available_objectives())
    assert objective_args("mlm") == ["--task", "masked_lm", "--criterion", "mlm"]
    taco = objective_args("taco")
    assert taco[:2] == ["--task", "taco_masked_lm"]
    for option, value in (("--criterion", "taco"), ("--tc-positions", "all"),
                          ("--tc-negatives", "50"), ("--tc-window", "5"),
                          ("--tc-temperature", "0.07"), ("--tc-weight", "1.0")):
        assert taco[taco.index(option) + 1] == value
    # tc_detach_keys: true is the default, so no flag (fairseq's flag would turn it off)
    assert "--tc-detach-keys" not in taco
    assert "--untie-weights-roberta" in objective_args("taco_untied")
    concentrated = objective_args("taco_concentrated")
    assert concentrated[concentrated.index("--tc-positions") + 1] == "masked"
    shared = shared_args()
    assert shared[shared.index("--adam-betas") + 1] == "(0.9,0.999)"
    assert shared[shared.index("--sample-break-mode") + 1] == "none"
    with pytest.raises(ValueError, match="choose from .*taco"):
        objective_args("tacoo")


def test_a_boolean_that_differs_from_its_default_becomes_its_flag(tmp_path):
    (tmp_path / "keys_small.yaml").write_text(
        "task:\n  _name: taco_masked_lm\ncriterion:\n  _name: taco\n  tc_detach_keys: false\n"
        "  tc_weight: 0.5\n")
    args = objective_args("keys", tmp_path)
    assert "--tc-detach-keys" in args and args[args.index("--tc-weight") + 1] == "0.5"


def test_settings_are_checked():
    with pytest.raises(ValueError, match="beyond --max-update"):
        PretrainSettings(data=SHARED, arch="roberta_tiny", max_update=10,
                         checkpoint_updates=(5, 20), warmup_updates=1)
    settings = PretrainSettings(data=SHARED, arch="roberta_tiny", max_update=40,
                                checkpoint_updates=(10, 25, 40), warmup_updates=1)
    assert settings.save_interval == 5


def test_a_run_being_trained_by_another_process_is_left_alone(tmp_path):
    """Two invocations must never train one run directory: the second stops, naming it."""
    settings = PretrainSettings(data=SHARED, arch="roberta_tiny", max_update=10,
                                checkpoint_updates=(10,), warmup_updates=1)
    run_dir = tmp_path / "pretrain" / "taco-seed1"
    run_dir.mkdir(parents=True)
    with open(run_dir / LOCK_FILE, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(RuntimeError, match="being pre-trained by another process"):
            pretrain(PretrainRun("taco", 1), settings, tmp_path)
    assert not (run_dir / "train.log").exists()


def test_a_run_is_continued_only_with_the_options_it_was_started_with(tmp_path):
    """Another --lr (or fairseq option) for a run that exists is an error naming what changed,
    before anything is trained; another --user-dir (another checkout) is not."""
    settings = PretrainSettings(data=SHARED, arch="roberta_tiny", max_update=10,
                                checkpoint_updates=(10,), warmup_updates=1, lr=1e-3)
    run = PretrainRun("taco", 1)
    run_dir = tmp_path / "pretrain" / run.name
    run_dir.mkdir(parents=True)
    args = pretrain_args(run, settings, run_dir)
    other_checkout = [("/elsewhere/taco_fairseq" if a.endswith("taco_fairseq") else a)
                      for a in args]
    (run_dir / "train.log").write_text("# fairseq-train " + " ".join(other_checkout) + "\n")
    check_same_options(run_dir, args)
    changed = dataclasses.replace(settings, lr=5e-4, extra=("--dropout", "0.3"))
    with pytest.raises(ValueError) as error:
        pretrain(run, changed, tmp_path)
    assert str(run_dir) in str(error.value)
    assert "--lr 0.001 → 0.0005" in str(error.value)
    assert "--dropout 0.1 → 0.3" in str(error.value)  # the last value counts, as in fairseq
    assert (run_dir / "train.log").read_text().count("# fairseq-train") == 1  # nothing ran


@pytest.mark.slow
def test_the_initialization_is_what_fairseq_train_starts_from(tiny_databin, tmp_path):
    """Checkpoint 0 equals the parameters a fairseq-train run of the same options starts from
    (one update at a negligible learning rate moves them by ~1e-9), is the same for mlm and
    taco, differs between seeds, and loads like any checkpoint."""
    import torch

    from taco_fairseq.analysis.checkpoints import checkpoint_updates, load_checkpoint
    from taco_fairseq.metadata import load_lazily

    settings = PretrainSettings(
        data=tiny_databin, arch="roberta_tiny", max_update=1, checkpoint_updates=(1,),
        tokens_per_sample=64, batch_size=8, lr=1e-9, warmup_updates=0, cpu=True,
        extra=("--num-workers", "0", "--max-valid-steps", "1"))
    taco = PretrainRun("taco", 3)
    run_dir = pretrain(taco, settings, tmp_path)
    initialization = save_initialization(taco, settings, run_dir)
    assert initialization == run_dir / "initialization.pt"
    assert checkpoint_updates(initialization) == 0
    start = load_lazily(initialization)["model"]
    trained = load_lazily(next((run_dir / "checkpoints").glob("checkpoint_*_1.pt")))["model"]
    assert start.keys() == trained.keys()
    moved = 0.0
    for name, value in start.items():
        torch.testing.assert_close(trained[name], value, rtol=0, atol=1e-7, msg=name)
        moved = max(moved, float((trained[name].float() - value.float()).abs().max()))
    assert moved > 0  # fairseq-train did update them

    mlm = load_lazily(save_initialization(PretrainRun("mlm", 3), settings,
                                          tmp_path / "pretrain" / "mlm-seed3"))["model"]
    assert mlm.keys() == start.keys()
    assert all(torch.equal(mlm[name], start[name]) for name in start)
    other = load_lazily(save_initialization(PretrainRun("taco", 4), settings,
                                            tmp_path / "pretrain" / "taco-seed4"))["model"]
    assert not torch.equal(other["encoder.sentence_encoder.embed_tokens.weight"],
                           start["encoder.sentence_encoder.embed_tokens.weight"])
    hub = load_checkpoint(initialization, tiny_databin).hub
    assert hub.extract_features(hub.encode("A sentence.")).shape[-1] == 128


def _small_treebanks(directory, sentences=120):
    """The first ``sentences`` of UD English EWT's dev and test in ``directory`` (read at test
    time from ../shared): the part-of-speech probe's --conllu-train and --conllu-test."""
    source = SHARED / "data" / "ud-english-ewt"
    if not source.is_dir():
        pytest.skip(f"UD English EWT not found in {source}")
    paths = []
    for split in ("dev", "test"):
        text = (source / f"en_ewt-ud-{split}.conllu").read_text(encoding="utf-8")
        path = directory / f"{split}.conllu"
        path.write_text("\n\n".join(text.split("\n\n")[:sentences]) + "\n\n", encoding="utf-8")
        paths.append(path)
    return paths


@pytest.mark.slow
def test_toy_comparison_end_to_end(tiny_databin, glue_databin, wikitext_test, tmp_path):
    out = tmp_path / "compare"
    train, test = _small_treebanks(tmp_path)
    command = [
        "--data", tiny_databin, "--glue-data", glue_databin, "--out", out,
        "--arch", "roberta_tiny", "--max-update", "12", "--checkpoint-updates", "6", "12",
        "--tokens-per-sample", "64", "--batch-size", "8", "--warmup-updates", "2",
        "--tasks", "RTE", "--seeds", "1", "--finetune-lr", "5e-5", "1e-4",
        "--finetune-max-updates", "RTE=2",
        "--heldout-text", wikitext_test, "--heldout-sentences", "40", "--cpu",
        "--probe-tasks", "RTE", "STS-B", "--probe-max-train", "400",
        "--conllu-train", train, "--conllu-test", test,
        "--heldout-mlm-text", f"wikitext2={wikitext_test}",
        "--", "--num-workers", "0", "--log-interval", "1", "--max-valid-steps", "2",
    ]
    result = run_script("compare_objectives.py", *command)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    for phase in ("1/5", "2/5", "3/5", "4/5", "5/5"):
        assert f"== {phase}" in result.stdout
    assert "checkpoints so far" in result.stdout  # measured in phase 1, as they were saved
    counts = re.findall(r"measured (\d+) checkpoints so far", result.stdout)
    assert len(counts) == len(set(counts)), counts  # a line per new row, not per poll

    with open(out / "summary.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert {"objective", "pretrain_seed", "updates", "task", "seed", "metric",
            "score"} <= set(rows[0])
    assert sorted((r["objective"], r["updates"]) for r in rows) == sorted(
        (o, u) for o in ("mlm", "taco") for u in ("6", "12"))
    # the search at the last checkpoint: both points for both objectives, one chosen for all
    search = json.loads((out / "search.json").read_text())
    assert set(search["RTE"]["mean_dev_score"]) == {"bs32_lr5e-05_ep4", "bs32_lr0.0001_ep4"}
    chosen = search["RTE"]["chosen"]
    for objective in ("mlm", "taco"):
        assert sorted(p.name for p in (out / "finetune" / f"{objective}-seed1@12" / "RTE")
                      .iterdir()) == ["bs32_lr0.0001_ep4", "bs32_lr5e-05_ep4"]
        assert [p.name for p in (out / "finetune" / f"{objective}-seed1@6" / "RTE")
                .iterdir()] == [chosen]
    assert {r["task"] for r in rows} == {"RTE"} and {r["metric"] for r in rows} == {"accuracy"}
    assert all(0 <= float(r["score"]) <= 100 for r in rows)

    # the same data, initialization, batch and masks: update 1's masked-LM loss is the same
    first = {}
    for objective, key in (("mlm", "loss"), ("taco", "mlm_loss")):
        log = (out / "pretrain" / f"{objective}-seed1" / "train.log").read_text().splitlines()
        record = next(r for r in parse_json_log(log) if r["kind"] == "train_inner")
        assert record["num_updates"] == 1
        first[objective] = record[key]
    assert first["mlm"] == first["taco"]

    with open(out / "checkpoints.csv", newline="") as f:
        measures = list(csv.DictReader(f))
    # the checkpoints and the initializations (update 0, measured once, shared by mlm and taco)
    assert sorted((m["objective"], int(m["updates"])) for m in measures) == sorted(
        (o, u) for o in ("mlm", "taco") for u in (0, 6, 12))
    assert all(float(m["valid_mlm_loss"]) > 0 and -1 <= float(m["contextual_score"]) <= 1
               for m in measures if m["updates"] != "0")
    # no validation at update 0: an empty cell (it was "nan")
    assert all(m["valid_mlm_loss"] == "" for m in measures if m["updates"] == "0")
    for m in measures:
        assert 0 <= float(m["probe_RTE"]) <= 100 and -100 <= float(m["probe_STS-B"]) <= 100
        assert float(m["probe_average"]) == pytest.approx(
            (float(m["probe_RTE"]) + float(m["probe_STS-B"])) / 2)
        assert -100 <= float(m["sts_unsupervised"]) <= 100
        assert 0 < float(m["neighbour_attention"]) < 1
        assert 0 < float(m["attention_entropy"]) <= float(m["attention_entropy_uniform"]) + 1e-9
        # the part-of-speech probe (every layer) and the held-out masked-LM loss, every row
        for key in ("pos_accuracy", "pos_accuracy_ambiguous", "pos_accuracy_layer0",
                    "pos_accuracy_layer2", "pos_accuracy_baseline"):
            assert 0 < float(m[key]) <= 100
        assert 0 < float(m["mlm_loss_wikitext2"]) < 20
    initial = [{k: v for k, v in m.items() if k != "objective"} for m in measures
               if m["updates"] == "0"]
    assert initial[0] == initial[1]
    assert all((out / "pretrain" / f"{o}-seed1" / "initialization.pt").is_file()
               for o in ("mlm", "taco"))
    report = (out / "report.md").read_text()
    for text in ("## Wall time", "## Fine-tuning hyper-parameters", "| mlm | 6 |", "| taco | 12 |",
                 "taco − mlm at equal updates", "Speed-up of taco over mlm",
                 "Does the baseline improve"):
        assert text in report
    for figure in ("glue_average", "difference", "tasks", "checkpoints"):
        assert (out / f"{figure}.png").read_bytes()[:4] == b"\x89PNG"
    timings = json.loads((out / "timings.json").read_text())
    assert set(timings) == {"pre-training", "checkpoint measures", "fine-tuning search",
                            "fine-tuning"}

    # the report of what has finished, running nothing: the same table
    (out / "report.md").unlink()
    only = run_script("compare_objectives.py", "--report-only", *command)
    assert only.returncode == 0, only.stderr[-3000:]
    assert "(finished before)" not in only.stdout + only.stderr
    assert (out / "report.md").read_text().split("## Wall time")[1] == report.split(
        "## Wall time")[1]
    # --out alone: the study's options are read from OUT/study.json
    alone = run_script("compare_objectives.py", "--report-only", "--out", out)
    assert alone.returncode == 0, alone.stderr[-3000:]
    assert (out / "report.md").read_text().split("## Wall time")[1] == report.split(
        "## Wall time")[1]

    # run again: nothing is trained again
    logs = {p: p.read_text() for p in (out / "pretrain").glob("*/train.log")}
    again = run_script("compare_objectives.py", *command)
    assert again.returncode == 0, again.stderr[-3000:]
    assert {p: p.read_text() for p in logs} == logs
    # the search is in OUT/search.json, so only phase 4's 4 fine-tunings are looked at again
    assert (again.stdout + again.stderr).count("(finished before)") == 4


def test_cached_measures_get_the_missing_ones_and_initializations_are_measured_once(
        monkeypatch, tmp_path):
    """Phase 2 adds the measures a cached row lacks (a study measured before the probes
    existed) without measuring the others again, and measures two identical initializations
    of one seed once."""
    import torch

    from taco_fairseq.comparison import study
    from taco_fairseq.glue.recipes import Hyperparameters

    settings = PretrainSettings(data=tmp_path / "data", arch="roberta_tiny", max_update=10,
                                checkpoint_updates=(10,), warmup_updates=1)
    options = study.StudyOptions(
        out=tmp_path, objectives=["mlm", "taco"], pretrain_seeds=[1], settings=settings,
        glue_data=tmp_path / "glue", tasks=["RTE"], seeds=[1],
        points=[Hyperparameters(32, 1e-5, 1)], probe_tasks=["RTE", "STS-B"])
    same = {"w": torch.arange(6.0)}
    found = []
    for objective in ("mlm", "taco"):
        path = tmp_path / f"{objective}-init.pt"
        torch.save({"model": same}, path)
        found.append(study.StudyCheckpoint(PretrainRun(objective, 1), 0, path))
    torch.save({"model": same}, tmp_path / "last.pt")
    last = study.StudyCheckpoint(PretrainRun("taco", 1), 10, tmp_path / "last.pt")
    (tmp_path / "measures").mkdir()
    cached = {"objective": "taco", "pretrain_seed": 1, "updates": 10, "valid_mlm_loss": 7.5,
              "probe_RTE": 55.0}
    (tmp_path / "measures" / "taco-seed1@10.json").write_text(json.dumps(cached))
    calls = []

    def measure(options, checkpoint, missing, inputs):
        calls.append((checkpoint.name, list(missing)))
        return {m if m.startswith("probe_") else "sts_unsupervised": 1.0 for m in missing}

    monkeypatch.setattr(study, "_measure", measure)
    rows = study.measure_checkpoints(options, [*found, last])
    assert calls == [("mlm-seed1@0", ["probe_RTE", "probe_STS-B", "unsupervised"]),
                     ("taco-seed1@10", ["probe_STS-B", "unsupervised"])]
    assert rows[0]["probe_RTE"] == rows[1]["probe_RTE"] == 1.0 and rows[1]["objective"] == "taco"
    assert rows[2] == {**cached, "probe_STS-B": 1.0, "sts_unsupervised": 1.0}
    assert json.loads((tmp_path / "measures" / "taco-seed1@10.json").read_text()) == rows[2]
    calls.clear()
    again = study.measure_checkpoints(options, [*found, last])
    assert json.dumps(again) == json.dumps(rows) and calls == []  # (NaN loss at update 0)


@pytest.mark.parametrize("recorded, measured_again", [
    ({}, False),                   # measured before the window was recorded: kept
    ({"pos_window": 32}, False),   # the same window (the runs' positions)
    ({"pos_window": 128}, True),   # another window: measured again
])
def test_a_part_of_speech_probe_of_another_window_is_measured_again(monkeypatch, tmp_path,
                                                                    recorded, measured_again):
    from taco_fairseq.comparison import study

    settings = PretrainSettings(data=tmp_path / "data", arch="roberta_tiny", max_update=10,
                                checkpoint_updates=(10,), warmup_updates=1, tokens_per_sample=32)
    options = study.StudyOptions(
        out=tmp_path, objectives=["mlm"], pretrain_seeds=[1], settings=settings,
        glue_data=tmp_path / "glue", tasks=[], seeds=[], points=[],
        conllu_train=tmp_path / "train.conllu", conllu_test=tmp_path / "test.conllu")
    assert study.pos_window(options) == 32
    assert study.pos_window(dataclasses.replace(options, pos_window=16)) == 16
    (tmp_path / "measures").mkdir()
    cached = {"objective": "mlm", "pretrain_seed": 1, "updates": 10, "valid_mlm_loss": 7.5,
              "pos_accuracy": 80.0, **recorded}
    (tmp_path / "measures" / "mlm-seed1@10.json").write_text(json.dumps(cached))
    calls = []
    monkeypatch.setattr(study, "_measure", lambda options, checkpoint, missing, inputs:
                        calls.append(list(missing)) or {"pos_accuracy": 81.0, "pos_window": 32})
    checkpoint = study.StudyCheckpoint(PretrainRun("mlm", 1), 10, tmp_path / "last.pt")
    (row,) = study.measure_checkpoints(options, [checkpoint])
    assert calls == ([["pos"]] if measured_again else [])
    assert row["pos_accuracy"] == (81.0 if measured_again else 80.0)


def test_cpu_threads_respect_a_users_omp_num_threads(monkeypatch, capsys, tmp_path):
    """--cpu gives each of --jobs runs cores/jobs threads, unless the user set
    OMP_NUM_THREADS (before: overwritten with cores/jobs); the printed line says which."""
    import os

    import torch

    from taco_fairseq.comparison import study
    from taco_fairseq.glue.recipes import Hyperparameters

    options = study.StudyOptions(
        out=tmp_path, objectives=["mlm"], pretrain_seeds=[1],
        settings=PretrainSettings(tmp_path, "roberta_tiny", 10, (10,), warmup_updates=1),
        glue_data=tmp_path, tasks=["RTE"], seeds=[1], points=[Hyperparameters(32, 1e-5, 1)],
        jobs=2, cpu=True)
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    study.set_threads(options)
    assert os.environ["OMP_NUM_THREADS"] == "3" and "MKL_NUM_THREADS" not in os.environ
    assert capsys.readouterr().out == ("   3 threads per run, as OMP_NUM_THREADS sets (2 side "
                                       "by side; unset it for cores/--jobs)\n")
    monkeypatch.delenv("OMP_NUM_THREADS")
    study.set_threads(options)
    assert os.environ["OMP_NUM_THREADS"] == os.environ["MKL_NUM_THREADS"] == "4"
    assert capsys.readouterr().out.startswith("   4 threads per run (2 side by side: ")


def test_phase_2_measures_in_worker_processes_as_in_one(trained_checkpoint, tiny_databin,
                                                      wikitext_test, monkeypatch, tmp_path):
    """With jobs > 1 on the CPU, phase 2 measures in worker processes (a failing ``_measure``
    in this process is never called); its rows, in the order given, and its cached files are
    bit for bit those of one process at the same thread count."""
    import torch

    from taco_fairseq.comparison import study
    from taco_fairseq.glue.recipes import Hyperparameters

    path = trained_checkpoint / "checkpoint_last.pt"
    found = [study.StudyCheckpoint(PretrainRun(objective, 1), updates, path)
             for updates in (0, 10, 20) for objective in ("mlm", "taco")]

    def options(out, jobs):
        return study.StudyOptions(
            out=out, objectives=["mlm", "taco"], pretrain_seeds=[1],
            settings=PretrainSettings(tiny_databin, "roberta_tiny", 20, (10, 20),
                                      warmup_updates=1),
            glue_data=tmp_path, tasks=["RTE"], seeds=[1], points=[Hyperparameters(32, 1e-5, 1)],
            heldout_text=[wikitext_test], heldout_sentences=60, jobs=jobs, cpu=True)

    threads = torch.get_num_threads()
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the workers' thread count, as set_threads
    torch.set_num_threads(1)
    try:
        one = study.measure_checkpoints(options(tmp_path / "one", 1), found)

        def elsewhere(*args):
            raise AssertionError("measured in the parent process")

        monkeypatch.setattr(study, "_measure", elsewhere)
        two = study.measure_checkpoints(options(tmp_path / "two", 2), found)
    finally:
        torch.set_num_threads(threads)
    assert json.dumps(two) == json.dumps(one)
    assert [(r["objective"], r["updates"]) for r in two] == [
        (c.run.objective, c.updates) for c in found]
    for checkpoint in found:
        name = f"{checkpoint.name}.json"
        assert (tmp_path / "two" / "measures" / name).read_text() == (
            tmp_path / "one" / "measures" / name).read_text()


def test_the_search_runs_on_the_first_pretraining_seed(monkeypatch, tmp_path):
    """Every objective × task × fine-tuning seed × point at the last checkpoint of the first
    pre-training seed only; the point with the best mean over objectives and seeds wins."""
    from taco_fairseq.comparison import study
    from taco_fairseq.glue.recipes import Hyperparameters

    low, high = Hyperparameters(32, 1e-4, 4), Hyperparameters(32, 3e-4, 4)
    options = study.StudyOptions(
        out=tmp_path, objectives=["mlm", "taco"], pretrain_seeds=[2, 1],
        settings=PretrainSettings(tmp_path, "roberta_tiny", 10, (5, 10), warmup_updates=1),
        glue_data=tmp_path, tasks=["RTE"], seeds=[1, 2], points=[low, high])
    found = [study.StudyCheckpoint(run, u, tmp_path / f"{run.name}_{u}.pt")
             for run in options.runs for u in (5, 10)]
    scores = {("mlm", low): 60.0, ("taco", low): 50.0, ("mlm", high): 54.0, ("taco", high): 55.0}
    ran = []

    def run_all(runs, runner_options, jobs):
        ran.extend(runs)
        return [{"dev": {"RTE": {"accuracy": scores[(r.checkpoint.name.split("-")[0], r.hyper)]}}}
                for r in runs]

    monkeypatch.setattr(study, "run_all", run_all)
    chosen = study.search_points(options, found)
    assert sorted((r.checkpoint.name, r.hyper.lr, r.seed) for r in ran) == sorted(
        (f"{o}-seed2@10", p.lr, s) for o in ("mlm", "taco") for p in (low, high) for s in (1, 2))
    assert chosen == {"RTE": low}  # mean 55.0 over both objectives, against 54.5
    search = json.loads((tmp_path / "search.json").read_text())
    assert search["RTE"] == {"chosen": low.label,
                             "mean_dev_score": {low.label: 55.0, high.label: 54.5}}


def _search_argv(tmp_path, *extra):
    data = tmp_path / "bin"
    data.mkdir(exist_ok=True)
    (data / "dict.txt").write_text("a 1\n")
    for task in ("RTE", "STS-B", "CoLA", "MRPC"):  # prepared, as far as the checks look
        (tmp_path / "glue" / task / "input0").mkdir(parents=True, exist_ok=True)
        (tmp_path / "glue" / task / "prep_info.json").write_text("{}")
        (tmp_path / "glue" / task / "input0" / "dict.txt").write_text("a 1\n")
    earlier = tmp_path / "earlier.json"
    earlier.write_text(json.dumps({
        "RTE": {"chosen": "bs32_lr0.0003_ep4", "mean_dev_score": {}},
        "STS-B": {"chosen": "bs32_lr0.001_ep4", "mean_dev_score": {}}}))
    return [str(a) for a in (
        "--data", data, "--glue-data", tmp_path / "glue", "--out", tmp_path / "out",
        "--arch", "roberta_tiny", "--max-update", "10", "--checkpoint-updates", "10",
        "--seeds", "1", "--finetune-search-from", earlier, *extra)]


def test_a_search_from_an_earlier_study_is_used_not_run(monkeypatch, tmp_path):
    """--finetune-search-from: its chosen points go to OUT/search.json and phase 3 runs
    nothing."""
    from taco_fairseq.cli import compare
    from taco_fairseq.comparison import study

    options, _ = compare.parse_options(_search_argv(
        tmp_path, "--tasks", "RTE", "STS-B", "--finetune-lr", "3e-4", "1e-3"))
    earlier = tmp_path / "earlier.json"
    assert json.loads((tmp_path / "out" / "search.json").read_text()) == {
        task: {**entry, "searched_in": str(earlier.resolve())}
        for task, entry in json.loads(earlier.read_text()).items()}

    def run_all(*args):
        raise AssertionError("the search ran")

    monkeypatch.setattr(study, "run_all", run_all)
    chosen = study.search_points(options, [])
    assert {t: p.lr for t, p in chosen.items()} == {"RTE": 3e-4, "STS-B": 1e-3}


@pytest.mark.parametrize("extra, message", [
    (["--tasks", "RTE", "--finetune-lr", "1e-3"], "RTE chose bs32_lr0.0003_ep4, not a point"),
    (["--tasks", "RTE", "CoLA", "--finetune-lr", "3e-4"], "no point for CoLA"),
])
def test_a_search_from_an_earlier_study_must_fit_the_grid(tmp_path, capsys, extra, message):
    from taco_fairseq.cli import compare

    with pytest.raises(SystemExit):
        compare.parse_options(_search_argv(tmp_path, *extra))
    err = capsys.readouterr().err
    assert "--finetune-search-from" in err and message in err
    assert not (tmp_path / "out" / "search.json").exists()


@pytest.mark.parametrize("content, message", [
    (None, "no such file"),
    ("[1, 2]", "not the search.json of a comparison"),
    ('{"RTE": "bs32_lr0.0003_ep4"}', "not the search.json of a comparison"),
    ("{", "cannot read it as JSON"),
])
def test_a_search_file_that_is_no_search_is_named(tmp_path, capsys, content, message):
    from taco_fairseq.cli import compare

    argv = _search_argv(tmp_path, "--tasks", "RTE", "--finetune-lr", "3e-4")
    earlier = tmp_path / "earlier.json"
    if content is None:
        earlier.unlink()
    else:
        earlier.write_text(content)
    with pytest.raises(SystemExit):
        compare.parse_options(argv)
    err = capsys.readouterr().err
    assert f"--finetune-search-from {earlier}: {message}" in err and "Traceback" not in err


def test_an_unprepared_task_is_named_before_anything_runs(tmp_path, capsys):
    from taco_fairseq.cli import compare

    with pytest.raises(SystemExit):
        compare.parse_options(_search_argv(tmp_path, "--tasks", "RTE", "SST-2",
                                           "--finetune-lr", "3e-4"))
    err = capsys.readouterr().err
    assert f"--glue-data {tmp_path / 'glue'}: SST-2 not prepared" in err
    assert "taco-prepare-glue --tasks SST-2" in err


def test_missing_heldout_text_is_named_before_anything_runs(tmp_path, capsys):
    """--heldout-text is read in phase 2: a path that is not there (e.g. relative to another
    directory) stops the command before pre-training, not hours later."""
    from taco_fairseq.cli import compare

    present = tmp_path / "present.txt"
    present.write_text("One sentence.\n")
    with pytest.raises(SystemExit):
        compare.parse_options(_search_argv(tmp_path, "--tasks", "RTE", "--finetune-lr", "3e-4",
                                           "--heldout-text", present, tmp_path / "absent.txt"))
    err = capsys.readouterr().err
    assert f"--heldout-text: no such file: {tmp_path / 'absent.txt'} (" in err
    assert str(present) not in err and not (tmp_path / "out").exists()


@pytest.mark.parametrize("name, content, message", [
    ("empty.txt", "", "no text found (the file is empty, blank or markup only); give a file of "
                      "raw text not seen in pre-training"),
    ("blank.txt", "\n  \n\t\n", "no text found (the file is empty, blank or markup only); "
                                "give a file of raw text not seen in pre-training"),
    ("empty.txt.xz", b"", "no text found (the file is empty, blank or markup only)"),
    ("utf16.txt", "One sentence.\n".encode("utf-16"), "give a file of raw text not seen in "
                                                        "pre-training"),
    ("texts", None, "a directory, not a file; give text files in it (plain, .xz or .gz)"),
])
def test_heldout_text_without_text_is_named_before_anything_runs(tmp_path, capsys, name,
                                                                   content, message):
    """A fresh user's empty --heldout-text stopped phase 2, after all of pre-training, with an
    error naming neither the option nor what to do; a directory was "no such file"."""
    import lzma

    from taco_fairseq.cli import compare

    path = tmp_path / name
    if content is None:
        path.mkdir()
    elif name.endswith(".xz"):
        path.write_bytes(lzma.compress(content))
    else:
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    present = tmp_path / "present.txt"
    present.write_text("One sentence. Another one.\n" * 50)
    with pytest.raises(SystemExit):
        compare.parse_options(_search_argv(tmp_path, "--tasks", "RTE", "--finetune-lr", "3e-4",
                                           "--heldout-text", present, path))
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"error: --heldout-text {path}: " in err
    assert message in err and str(present) not in err
    assert not (tmp_path / "out").exists()


def test_glue_data_of_another_dictionary_is_an_error_before_pretraining(tmp_path, capsys):
    """The dictionary check of phase 4 (the checkpoints' fingerprints against each task's
    input0/dict.txt), made against --data before anything runs."""
    from taco_fairseq.cli import compare

    argv = _search_argv(tmp_path, "--tasks", "RTE", "MRPC", "--finetune-lr", "3e-4")
    (tmp_path / "glue" / "MRPC" / "input0" / "dict.txt").write_text("b 1\n")  # as many symbols
    with pytest.raises(SystemExit):
        compare.parse_options(argv)
    err = capsys.readouterr().err
    data, glue = tmp_path / "bin", tmp_path / "glue"
    assert (f"--glue-data {glue} (checked against --data {data} before pre-training): checkpoint "
            f"{tmp_path / 'out' / 'pretrain'}/*/checkpoints/*.pt (to be pre-trained on --data "
            f"{data}) was trained with another dictionary (6 symbols) than "
            f"{glue / 'MRPC' / 'input0' / 'dict.txt'} (6 symbols)") in err
    assert f"It was trained on {data.resolve() / 'dict.txt'}." in err
    assert "taco-prepare-glue --pretraining-data" in err
    assert not (tmp_path / "out").exists()


def _recorded(out):
    """OUT/study.json as JSON."""
    return json.loads((out / "study.json").read_text())


def test_a_report_only_call_records_the_command_the_runs_were_made_with(monkeypatch, tmp_path):
    """report.md of a --report-only call (without the `--` options, or with --out alone) gives
    the command that ran the phases, which it does not replace, and names the --report-only
    call besides."""
    from taco_fairseq.cli import compare
    from taco_fairseq.comparison import run
    from taco_fairseq.comparison.statistics import Score

    scores = [Score(o, 1, 10, "RTE", 1, "accuracy", 60.0, "accuracy", 60.0)
              for o in ("mlm", "taco")]
    monkeypatch.setattr(run, "run_phases", lambda options, timer: ([], scores))
    monkeypatch.setattr(run, "collect_results", lambda finetune: [])
    monkeypatch.setattr(run, "scores_of", lambda results, points: scores)
    argv = [a for a in _search_argv(tmp_path, "--tasks", "RTE", "--finetune-lr", "3e-4")
            if a != "--finetune-search-from" and a != str(tmp_path / "earlier.json")]
    ran = "taco-compare " + shlex.join([*argv, "--", "--num-workers", "0"])
    compare.main([*argv, "--", "--num-workers", "0"])
    report = tmp_path / "out" / "report.md"
    assert f"\nCommand: `{ran}`\n" in report.read_text()
    recorded = _recorded(tmp_path / "out")
    assert recorded["format"] == 1 and recorded["command"] == ran
    assert recorded["options"]["settings"]["extra"] == ["--num-workers", "0"]

    for call in (["--report-only", *argv], ["--report-only", "--out", str(tmp_path / "out")]):
        compare.main(call)
        text = report.read_text()
        assert f"\nCommand: `{ran}`\n" in text
        assert ("Report written by `taco-compare " + shlex.join(call)
                + "` (--report-only: it ran nothing).") in text
        assert _recorded(tmp_path / "out") == recorded

    def refused(options, timer):
        raise ValueError("pre-trained with other options")

    monkeypatch.setattr(run, "run_phases", refused)  # a call that fails keeps the record
    with pytest.raises(SystemExit, match="pre-trained with other options"):
        compare.main([*argv, "--lr", "1e-3"])
    assert _recorded(tmp_path / "out") == recorded


def test_a_cap_of_a_task_that_is_not_finetuned_is_an_error(tmp_path, capsys):
    from taco_fairseq.cli import compare

    with pytest.raises(SystemExit):
        compare.parse_options(_search_argv(tmp_path, "--tasks", "RTE", "--finetune-lr", "3e-4",
                                           "--finetune-max-updates", "MRPC=10"))
    assert ("--finetune-max-updates caps MRPC, which is not fine-tuned (not in --tasks or "
            "--final-tasks: ") in capsys.readouterr().err


def test_caps_per_task_and_fairseqs_max_update_are_refused_before_pretraining(tmp_path, capsys):
    from taco_fairseq.cli import compare

    with pytest.raises(SystemExit):
        compare.parse_options(_search_argv(tmp_path, "--tasks", "RTE", "--finetune-lr", "3e-4",
                                           "--finetune-max-updates", "RTE=10",
                                           "--finetune-options", "--cpu --max-update 5"))
    assert "fairseq's --max-update among the fairseq options both cap" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_repeated_cap_flags_and_a_negative_warmup_are_refused(tmp_path, capsys):
    from taco_fairseq.cli import compare

    argv = ("--tasks", "RTE", "--finetune-lr", "3e-4")
    with pytest.raises(SystemExit):  # not the last flag silently
        compare.parse_options(_search_argv(tmp_path, *argv, "--finetune-max-updates", "RTE=3",
                                           "--finetune-max-updates", "RTE=4"))
    assert "--finetune-max-updates caps RTE twice (RTE=3, RTE=4)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        compare.parse_options(_search_argv(tmp_path, *argv, "--warmup-updates", "-1"))
    assert "argument --warmup-updates: must be >= 0, got -1" in capsys.readouterr().err
    for option in ("--pretrain-seeds", "--seeds"):  # fairseq's numpy seeding needs >= 0
        with pytest.raises(SystemExit):
            compare.parse_options(_search_argv(tmp_path, *argv, option, "-1"))
        assert f"argument {option}: must be >= 0, got -1" in capsys.readouterr().err
    options, _ = compare.parse_options(_search_argv(tmp_path, *argv, "--warmup-updates", "0"))
    assert options.settings.warmup_updates == 0


def test_the_documented_gpu_study_command_parses():
    from taco_fairseq.cli import compare

    text = (REPO / "docs" / "results.md").read_text()
    start = text.index("taco-compare --data data-bin/books-wiki")
    command = text[start:text.index("\n", text.index("--num-workers 2", start))]
    own, fairseq_args = compare.split_fairseq_args(shlex.split(command.replace("\\\n", " "))[1:])
    args = compare.build_parser().parse_args(own)
    assert args.finetune_options == "--fp16" and args.finetune_max_updates == ["SST-2=2000"]
    assert fairseq_args == ["--fp16", "--num-workers", "2"]


def test_a_search_from_an_earlier_study_does_not_replace_another(tmp_path, capsys):
    from taco_fairseq.cli import compare

    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "search.json").write_text('{"RTE": {"chosen": "x"}}')
    with pytest.raises(SystemExit):
        compare.parse_options(_search_argv(tmp_path, "--tasks", "RTE", "--finetune-lr", "3e-4"))
    assert "holds another search" in capsys.readouterr().err
    assert json.loads((tmp_path / "out" / "search.json").read_text()) == {"RTE": {"chosen": "x"}}


def test_the_same_search_from_another_path_continues_the_study(tmp_path):
    """run.sh passes a checkout-relative search.json: the same file in another checkout (another
    resolved path) must continue the study, not be taken for another search."""
    from taco_fairseq.cli import compare

    argv = _search_argv(tmp_path, "--tasks", "RTE", "--finetune-lr", "3e-4")
    compare.parse_options(argv)
    recorded = (tmp_path / "out" / "search.json").read_text()
    assert str(tmp_path / "earlier.json") in recorded
    elsewhere = tmp_path / "checkout2" / "earlier.json"
    elsewhere.parent.mkdir()
    elsewhere.write_text((tmp_path / "earlier.json").read_text())
    compare.parse_options([str(elsewhere) if a == str(tmp_path / "earlier.json") else a
                           for a in argv])
    assert (tmp_path / "out" / "search.json").read_text() == recorded


@pytest.mark.parametrize("extra, message", [
    (["--seeds", "1", "2", "1"], "--seeds given twice: 1"),
    (["--pretrain-seeds", "1", "1"], "--pretrain-seeds given twice: 1"),
    (["--objectives", "taco", "mlm", "taco"], "--objectives given twice: taco"),
    (["--finetune-lr", "3e-4", "3e-4"], "--finetune-lr given twice: 0.0003"),
])
def test_a_seed_or_objective_given_twice_is_an_error(tmp_path, capsys, extra, message):
    """It would be pre-trained or fine-tuned, and counted as a seed, twice."""
    from taco_fairseq.cli import compare

    with pytest.raises(SystemExit):
        compare.parse_options(_search_argv(tmp_path, "--tasks", "RTE", "--finetune-lr", "3e-4",
                                           *extra))
    assert f"error: {message} (each would be run and counted twice" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("fairseq_args, option", [
    (["--seed", "3"], "--pretrain-seeds"), (["--save-dir=x"], "--out"),
    (["-aroberta_base"], "--arch"), (["--num-workers", "0", "--lr", "1e-3"], "--lr")])
def test_pretraining_options_the_comparison_sets_are_an_error_after_the_separator(
        tmp_path, capsys, fairseq_args, option):
    """They would override every pre-training's value while its name and the report named the
    comparison's (e.g. --seed: two "seeds" pre-trained alike)."""
    from taco_fairseq.cli import compare

    with pytest.raises(SystemExit):
        compare.parse_options(_search_argv(tmp_path, "--tasks", "RTE", "--finetune-lr", "3e-4",
                                           "--", *fairseq_args))
    assert f"(fairseq keeps the last value); use taco-compare's {option}" in (
        capsys.readouterr().err)
    options, _ = compare.parse_options(_search_argv(
        tmp_path, "--tasks", "RTE", "--finetune-lr", "3e-4", "--", "--num-workers", "0",
        "--log-interval", "1"))
    assert options.settings.extra == ("--num-workers", "0", "--log-interval", "1")


def test_the_primary_endpoint_is_declared_once_per_study(monkeypatch, tmp_path, capsys):
    """--primary-endpoint opens the report; a later call in the same --out with another one
    (e.g. after seeing the results) is an error naming the recorded one, and changes nothing."""
    from taco_fairseq.cli import compare
    from taco_fairseq.comparison import run
    from taco_fairseq.comparison.statistics import Score

    scores = [Score(o, p, 10, "RTE", 1, "accuracy", 60.0 + p, "accuracy", 60.0 + p)
              for o in ("mlm", "taco") for p in (1, 2)]
    monkeypatch.setattr(run, "run_phases", lambda options, timer: ([], scores))
    monkeypatch.setattr(run, "collect_results", lambda finetune: [])
    monkeypatch.setattr(run, "scores_of", lambda results, points: scores)
    argv = [a for a in _search_argv(tmp_path, "--tasks", "RTE", "--finetune-lr", "3e-4")
            if a != "--finetune-search-from" and a != str(tmp_path / "earlier.json")]
    compare.main([*argv, "--primary-endpoint", "probe-average"])
    report = (tmp_path / "out" / "report.md").read_text()
    assert report.index("## Primary endpoint: the average of the frozen-encoder linear probes") \
        < report.index("## Wall time")
    assert "not available: `probe_average` not in OUT/measures" in report
    recorded = _recorded(tmp_path / "out")
    assert recorded["options"]["primary_endpoint"] == "probe-average"
    capsys.readouterr()
    with pytest.raises(SystemExit) as error:
        compare.main([*argv, "--primary-endpoint", "glue-average"])
    assert str(error.value) == (
        f"error: --primary-endpoint glue-average: {tmp_path / 'out' / 'study.json'} "
        "records probe-average for this study (the primary endpoint is declared before the "
        "results are seen); give --primary-endpoint probe-average, or use another --out for "
        "a new study")
    with pytest.raises(SystemExit) as error:  # as every option of the study (next test)
        compare.main(["--report-only", *argv])
    assert str(error.value).startswith(
        "error: --report-only: --primary-endpoint probe-average → glue-average (recorded in "
        f"{tmp_path / 'out' / 'study.json'} → given here)")
    assert _recorded(tmp_path / "out") == recorded
    compare.main(["--report-only", "--primary-endpoint", "probe-average", *argv])
    compare.main(["--report-only", "--out", str(tmp_path / "out")])
    assert "## Primary endpoint: the average of the frozen-encoder linear probes" in (
        tmp_path / "out" / "report.md").read_text()


@pytest.mark.parametrize("options, message", [
    (["--probe-tasks", "SST-2", "--no-probes"], "--probe-tasks with --no-probes"),
    # could never be measured: refused before any run (a fresh user's study ran to the end)
    (["--no-probes", "--primary-endpoint", "probe-average"],
     "--primary-endpoint probe-average without probes (--no-probes"),
])
def test_contradictory_probe_options_are_an_error(tmp_path, capsys, options, message):
    from taco_fairseq.cli import compare

    with pytest.raises(SystemExit):
        compare.parse_options(["--data", str(tmp_path), "--glue-data", str(tmp_path), "--out",
                               str(tmp_path / "out"), "--arch", "roberta_tiny", "--max-update",
                               "10", "--checkpoint-updates", "10", "--tasks", "RTE", "--seeds",
                               "1", *options])
    assert message in capsys.readouterr().err


# --- fine-tuning at the last checkpoint only (--final-tasks without --tasks) ------------------
def test_final_tasks_alone_are_a_study_finetuned_at_the_last_checkpoint(monkeypatch, tmp_path):
    """No --tasks: the options parse, the GLUE average is over --final-tasks, and phase 4
    fine-tunes the last checkpoint of every run only."""
    from taco_fairseq.cli import compare
    from taco_fairseq.comparison import study
    from taco_fairseq.glue.recipes import Hyperparameters

    options, _ = compare.parse_options(_search_argv(
        tmp_path, "--final-tasks", "STS-B", "RTE", "--finetune-lr", "3e-4", "1e-3"))
    assert (list(options.tasks), list(options.final_tasks)) == ([], ["STS-B", "RTE"])
    assert options.average_tasks == ["STS-B", "RTE"] and options.probe_tasks == ["STS-B", "RTE"]
    assert {t: p.lr for t, p in study.chosen_points(options).items()} == {"STS-B": 1e-3,
                                                                         "RTE": 3e-4}

    point = Hyperparameters(32, 1e-4, 4)
    options = study.StudyOptions(
        out=tmp_path, objectives=["mlm", "taco"], pretrain_seeds=[1, 2],
        settings=PretrainSettings(tmp_path, "roberta_tiny", 10, (5, 10), warmup_updates=1),
        glue_data=tmp_path, tasks=[], final_tasks=["RTE"], seeds=[1, 2], points=[point])
    found = [study.StudyCheckpoint(run, u, tmp_path / f"{run.name}_{u}.pt")
             for run in options.runs for u in (5, 10)]
    ran = []
    monkeypatch.setattr(study, "run_all", lambda runs, runner, jobs: ran.extend(runs) or [])
    study.finetune_all(options, found, {"RTE": point})
    assert sorted((r.checkpoint.name, r.task.name, r.seed) for r in ran) == sorted(
        (f"{o}-seed{p}@10", "RTE", s) for o in ("mlm", "taco") for p in (1, 2) for s in (1, 2))


@pytest.mark.parametrize("extra, message", [
    ([], "neither --tasks nor --final-tasks: give --final-tasks TASK... (fine-tuned at the last "
         "checkpoint) or --tasks TASK... (at every checkpoint); the primary endpoint "
         "(--primary-endpoint glue-average, the default) is their average"),
    (["--tasks"], "neither --tasks nor --final-tasks: give --final-tasks TASK..."),
    (["--primary-endpoint", "probe-average"], "--primary-endpoint probe-average without "
     "probes (--no-probes, or neither --probe-tasks nor fine-tuned tasks)"),
])
def test_no_finetuned_task_is_an_error_in_one_line(tmp_path, capsys, extra, message):
    from taco_fairseq.cli import compare

    with pytest.raises(SystemExit) as error:
        compare.parse_options(_search_argv(tmp_path, *extra))
    assert error.value.code == 2
    err = capsys.readouterr().err
    assert message in err.strip().splitlines()[-1]  # usage, then the one line of the error
    assert len([line for line in err.splitlines() if "error:" in line]) == 1


def test_a_study_started_with_tasks_continues_with_final_tasks_only(monkeypatch, tmp_path):
    """The 5-seed study was started with --tasks STS-B RTE and --primary-endpoint probe-average
    (recorded in command.txt by an older taco-compare); continued in the same --out with
    --final-tasks STS-B RTE and no --tasks, nothing refuses it, study.json records the new
    command, and the primary endpoint stays probe-average."""
    from taco_fairseq.cli import compare
    from taco_fairseq.comparison import run
    from taco_fairseq.comparison.statistics import Score

    base = [a for a in _search_argv(tmp_path, "--finetune-lr", "3e-4", "1e-3",
                                    "--pretrain-seeds", "1", "2",
                                    "--primary-endpoint", "probe-average")]
    (tmp_path / "out").mkdir()
    started = "taco-compare " + shlex.join([*base, "--tasks", "STS-B", "RTE", "--", "--cpu"])
    (tmp_path / "out" / "command.txt").write_text(started + "\n")
    scores = [Score(o, p, 10, t, 1, "accuracy", 60.0 + p, "accuracy", 60.0 + p)
              for o in ("mlm", "taco") for p in (1, 2) for t in ("STS-B", "RTE")]
    measures = [{"objective": o, "pretrain_seed": p, "updates": u, "valid_mlm_loss": None if u
                 == 0 else 9.0, "probe_average": 50.0 + p + (o == "taco") * (u > 0) * p}
                for o in ("mlm", "taco") for p in (1, 2) for u in (0, 10)]
    seen = []
    monkeypatch.setattr(run, "run_phases",
                        lambda options, timer: seen.append(options) or (measures, scores))
    continued = [*base, "--final-tasks", "STS-B", "RTE", "--", "--cpu"]
    compare.main(continued)
    assert (list(seen[0].tasks), list(seen[0].final_tasks)) == ([], ["STS-B", "RTE"])
    recorded = _recorded(tmp_path / "out")
    assert recorded["command"] == "taco-compare " + shlex.join(continued)
    assert recorded["options"]["tasks"] == [] and recorded["options"]["final_tasks"] == [
        "STS-B", "RTE"]
    assert recorded["options"]["primary_endpoint"] == "probe-average"
    report = (tmp_path / "out" / "report.md").read_text()
    assert "## Primary endpoint: the average of the frozen-encoder linear probes" in report
    assert ("averages over the tasks fine-tuned at the last checkpoint only (--final-tasks "
            "STS-B RTE)." in report and "at every checkpoint" not in report)
    assert "| 10 | taco − mlm | 2 | 51.5000 | 53.0000 | +1.5000 |" in report


def test_initializations_are_hashed_only_when_a_measure_is_missing(monkeypatch, tmp_path):
    """On a resume with every measure cached, no checkpoint is hashed again (a fresh study
    hashes each initialization once, to measure one seed's identical ones once)."""
    import torch

    from taco_fairseq.comparison import study
    from taco_fairseq.glue.recipes import Hyperparameters

    options = study.StudyOptions(
        out=tmp_path, objectives=["mlm", "taco"], pretrain_seeds=[1, 2],
        settings=PretrainSettings(tmp_path / "data", "roberta_tiny", 10, (10,),
                                  warmup_updates=1),
        glue_data=tmp_path / "glue", tasks=["RTE"], seeds=[1],
        points=[Hyperparameters(32, 1e-5, 1)], probe_tasks=["RTE"])
    found = []
    for objective in ("mlm", "taco"):
        for seed in (1, 2):
            path = tmp_path / f"{objective}-{seed}-init.pt"
            torch.save({"model": {"w": torch.arange(6.0) + seed}}, path)
            found.append(study.StudyCheckpoint(PretrainRun(objective, seed), 0, path))
    hashed, measured = [], []
    real = study._parameters_sha256
    monkeypatch.setattr(study, "_parameters_sha256", lambda path: hashed.append(path.name)
                        or real(path))
    monkeypatch.setattr(study, "_measure", lambda options, checkpoint, missing, inputs:
                        measured.append(checkpoint.name) or {"probe_RTE": 50.0})
    rows = study.measure_checkpoints(options, found)
    assert measured == ["mlm-seed1@0", "mlm-seed2@0"]  # taco's are the same networks
    assert sorted(hashed) == sorted(f"{o}-{s}-init.pt" for o in ("mlm", "taco") for s in (1, 2))
    assert [r["valid_mlm_loss"] for r in rows] == [None] * 4
    hashed.clear()
    assert study.measure_checkpoints(options, found) == rows and hashed == [] and len(
        measured) == 2


def test_the_heldout_sentences_are_encoded_once_and_the_rows_are_unchanged(
        trained_checkpoint, tiny_databin, wikitext_test, monkeypatch, tmp_path):
    """Phase 2's contextual score and neighbour attention share one encoding of the held-out
    sentences (per data-bin, for every checkpoint); the rows are bit for bit what measuring
    each on its own encoding gave (score_checkpoints, then neighbour_attention)."""
    from taco_fairseq.analysis import contextual_score
    from taco_fairseq.analysis.checkpoints import load_checkpoint
    from taco_fairseq.analysis.sentences import sample_sentences
    from taco_fairseq.comparison import study
    from taco_fairseq.glue.probes import neighbour_attention
    from taco_fairseq.glue.recipes import Hyperparameters

    path = trained_checkpoint / "checkpoint_last.pt"
    options = study.StudyOptions(
        out=tmp_path, objectives=["taco"], pretrain_seeds=[1],
        settings=PretrainSettings(tiny_databin, "roberta_tiny", 20, (20,), warmup_updates=1),
        glue_data=tmp_path, tasks=["RTE"], seeds=[1], points=[Hyperparameters(32, 1e-5, 1)],
        heldout_text=[wikitext_test], heldout_sentences=60, cpu=True)
    encodings = []
    real = contextual_score.encode_sentences
    monkeypatch.setattr(contextual_score, "encode_sentences",
                        lambda hub, sentences: encodings.append(1) or real(hub, sentences))
    inputs = study.MeasureInputs(options)
    rows = [study._measure(options, study.StudyCheckpoint(PretrainRun("taco", 1), u, path),
                           ["contextual", "attention"], inputs) for u in (10, 20)]
    assert len(encodings) == 1 and rows[0] == rows[1]

    loaded = load_checkpoint(path, tiny_databin)
    sentences = sample_sentences([wikitext_test], 60, seed=1)
    stats = contextual_score.score_checkpoints([loaded], sentences)[0]
    expected = {"contextual_score": stats["cosine_gap"], "intra_context_cos":
                stats["cosine_intra"], "inter_context_cos": stats["cosine_inter"],
                **neighbour_attention(loaded.hub.model, real(loaded.hub, sentences).tokens,
                                      loaded.hub.task.source_dictionary)}
    assert json.dumps(rows[0]) == json.dumps(expected)


# --- interim reports (no fine-tuning yet), no study, a control against a reference ------------
def _measured(out, objectives=("mlm", "taco"), seeds=(1, 2, 3), updates=(0, 10)):
    """OUT/measures/*.json as phase 2 leaves them: taco's masked-LM loss lower by 1 + p/10
    bits and its probe average higher by 5 + p/4 points at 10 updates (p: pre-training seed)."""
    (out / "measures").mkdir(parents=True)
    for o in objectives:
        for p in seeds:
            for u in updates:
                lead = (o == "taco") * (u > 0)
                row = {"objective": o, "pretrain_seed": p, "updates": u,
                       "valid_mlm_loss": None if u == 0 else 9.0 - lead * (1 + p / 10),
                       "probe_RTE": 55.0 + p, "probe_average": 50.0 + p + lead * (5 + p / 4),
                       "sts_unsupervised": 20.0 + p, "neighbour_attention": 0.02 + lead / 10}
                (out / "measures" / f"{o}-seed{p}@{u}.json").write_text(json.dumps(row))


def _report_argv(tmp_path, *extra):
    return _search_argv(tmp_path, "--final-tasks", "STS-B", "RTE", "--finetune-lr", "3e-4",
                        "1e-3", "--pretrain-seeds", "1", "2", "3", *extra)


def test_report_only_before_any_finetuning_reports_the_measures(tmp_path, capsys):
    """The 5-seed study while it fine-tunes: no metrics.json yet. --report-only writes the
    report of the checkpoint measures (the primary probe average tested), says no
    fine-tuning has finished, draws the measures' figure only and writes no input of the runs
    (search.json); with the default glue-average the primary endpoint has no verdict."""
    from taco_fairseq.cli import compare

    out = tmp_path / "out"
    _measured(out)
    compare.main(["--report-only", *_report_argv(tmp_path, "--primary-endpoint",
                                                 "probe-average")])
    report = (out / "report.md").read_text()
    head, rest = report.split("## Wall time")
    row = next(line for line in head.splitlines() if line.startswith("| 10 | taco − mlm"))
    assert row.startswith("| 10 | taco − mlm | 3 | 52.0000 | 57.5000 | +5.5000 | [")
    assert row.endswith("| taco ahead |")
    assert "**No fine-tuning has finished yet**" in rest
    assert rest.split("## Exploratory: valid_mlm_loss, taco − mlm")[1].split("\n## ")[0].count(
        "| taco ahead |") == 1
    assert "`probe_average` at 10 updates is the primary endpoint, tested above" not in rest
    assert sorted(p.name for p in out.iterdir()) == [
        "checkpoints.csv", "checkpoints.png", "measures", "report.md", "summary.csv"]
    assert (out / "summary.csv").read_text().splitlines() == [
        "objective,pretrain_seed,updates,task,seed,metric,score,paper_metric,paper_score"]
    with open(out / "checkpoints.csv", newline="") as f:
        assert len(list(csv.DictReader(f))) == 12

    compare.main(["--report-only", *_report_argv(tmp_path)])  # glue-average, the default
    head = (out / "report.md").read_text().split("## Wall time")[0]
    assert "## Primary endpoint: the GLUE dev average over STS-B, RTE (fine-tuned)" in head
    assert head.rstrip().endswith(
        "| 10 | taco − mlm | 0 | | | | | | | no verdict: no fine-tuning finished |")


@pytest.mark.parametrize("made, message", [
    (None, "no study here (no such directory; give the --out of a taco-compare study, or run "
           "taco-compare without --report-only to start one)"),
    ([], "no study here (none of study.json, command.txt, pretrain, measures, finetune in it; "
         "give the --out of a taco-compare study"),
    (["pretrain/taco-seed1"], "nothing to report yet (no checkpoint measured in measures/, no "
                              "fine-tuning finished in finetune/"),
])
def test_report_only_without_a_study_writes_nothing(tmp_path, made, message):
    from taco_fairseq.cli import compare

    out = tmp_path / "out"
    for folder in made or []:
        (out / folder).mkdir(parents=True)
    if made == []:
        out.mkdir()
    before = sorted(out.rglob("*")) if made is not None else None
    alone = [] if made else [["--out", str(out)]]  # with pretrain/: no record (next test)
    for given in (_report_argv(tmp_path), *alone):
        with pytest.raises(SystemExit) as error:
            compare.main(["--report-only", *given])
        assert str(error.value).startswith(f"error: --out {out}: {message}")
        assert "\n" not in str(error.value)
        assert (sorted(out.rglob("*")) if out.exists() else None) == before  # no search.json


def test_report_only_of_a_study_without_a_record_needs_its_options(tmp_path):
    """Measures but no study.json (nor command.txt): --out alone cannot know the study."""
    from taco_fairseq.cli import compare

    out = tmp_path / "out"
    _measured(out)
    with pytest.raises(SystemExit) as error:
        compare.main(["--report-only", "--out", str(out)])
    assert str(error.value) == (
        f"error: --out {out}: no study.json (nor the command.txt of an older taco-compare) "
        "records the study's options; give them with --report-only")
    compare.main(["--report-only", *_report_argv(tmp_path)])
    assert "Command: not recorded (" in (out / "report.md").read_text()


def _replaced(argv, option, *values):
    """``argv`` with ``option``'s values replaced by ``values`` (added when it has none)."""
    if option not in argv:
        return [*argv, option, *values]
    at = argv.index(option)
    end = next((i for i in range(at + 1, len(argv)) if argv[i].startswith("--")), len(argv))
    return [*argv[:at + 1], *values, *argv[end:]]


@pytest.mark.parametrize("option, values, change", [
    ("--objectives", ["taco", "mlm"], "--objectives mlm taco → taco mlm"),  # the baseline
    ("--pretrain-seeds", ["1", "2"], "--pretrain-seeds 1 2 3 → 1 2"),
    ("--checkpoint-updates", ["5", "10"], "--checkpoint-updates 10 → 5 10"),
    # the probes default to the fine-tuned tasks
    ("--final-tasks", ["RTE"], "--final-tasks STS-B RTE → RTE; --probe-tasks STS-B RTE → RTE"),
    ("--tasks", ["RTE"], "--probe-tasks STS-B RTE → RTE STS-B; --tasks (unset) → RTE"),
    ("--probe-tasks", ["RTE"], "--probe-tasks STS-B RTE → RTE"),
    ("--finetune-lr", ["3e-4"], "--finetune-lr 0.0003 0.001 → 0.0003"),
    ("--primary-endpoint", ["probe-average"], "--primary-endpoint glue-average → probe-average"),
    ("--no-probes", [], "--probe-tasks STS-B RTE → (unset)"),
    ("--", ["--num-workers", "2"], "-- --num-workers 0 → 2"),
])
def test_report_only_refuses_options_that_differ_from_the_recorded_study(
        tmp_path, option, values, change):
    """A fresh user's --report-only with other options than OUT/study.json's reported another
    study under the recorded command (a swapped baseline, another primary endpoint): refused,
    naming what differs and how to report the recorded study; where the files lie, how the runs
    ran, the report's own options and an omitted `--` part may differ."""
    from taco_fairseq.cli import compare
    from taco_fairseq.comparison.record import check_reported, read_record

    base = [a for a in _report_argv(tmp_path)
            if a not in ("--finetune-search-from", str(tmp_path / "earlier.json"))]
    ran = [*base, "--jobs", "2", "--", "--num-workers", "0"]
    out = tmp_path / "out"
    out.mkdir()
    (out / "command.txt").write_text("taco-compare " + shlex.join(ran) + "\n")
    recorded = read_record(out, compare.read_command)  # read into study.json
    assert _recorded(out)["command"] == "taco-compare " + shlex.join(ran)

    def given(argv):
        options, report_only = compare.parse_options(["--report-only", *argv])
        assert report_only
        return options, "--" in argv

    for same in (base, ["--cpu", "--reference", str(_reference(tmp_path, (1, 2, 3))), *_replaced(
            base, "--data", str(tmp_path / "bin2")), "--lr", "5e-4", "--jobs", "4", "--",
            "--num-workers", "0", "--user-dir", "/elsewhere/taco_fairseq"]):
        (tmp_path / "bin2").mkdir(exist_ok=True)
        (tmp_path / "bin2" / "dict.txt").write_text("a 1\n")
        check_reported(recorded, *given(same))
    argv = [*base, "--", *values] if option == "--" else _replaced(base, option, *values)
    with pytest.raises(ValueError) as error:
        check_reported(recorded, *given(argv))
    assert str(error.value) == (
        f"--report-only: {change} (recorded in {out / 'study.json'} → given here): the report "
        "is of the recorded study, and these options say what it is; give the recorded ones "
        "(only the paths, --jobs, --cpu and --reference may differ), or none: taco-compare "
        f"--report-only --out {out}")
    with pytest.raises(SystemExit) as error:  # and so does the command, writing nothing
        compare.main(["--report-only", *argv])
    assert str(error.value).startswith(f"error: --report-only: {change} (recorded in ")
    assert sorted(p.name for p in out.iterdir()) == ["command.txt", "study.json"]


def test_report_only_of_a_taco_only_study_without_its_objectives_is_refused(tmp_path):
    """A control recorded with --objectives taco, reported with the default objectives (mlm
    taco): an error naming --objectives, nothing written (before: a report against the
    baseline mlm, which has no runs here; with fine-tuning scores, a TypeError traceback from
    the figures); reported with --out alone, or with its options, it is reported."""
    from taco_fairseq.cli import compare
    from taco_fairseq.comparison.record import read_record

    out = tmp_path / "out"
    _measured(out, objectives=("taco",), seeds=(1,))
    ran = _report_argv(tmp_path, "--objectives", "taco")
    ran = _replaced(ran, "--pretrain-seeds", "1")
    (out / "command.txt").write_text("taco-compare " + shlex.join(ran) + "\n")
    read_record(out, compare.read_command)
    before = sorted(out.rglob("*"))
    with pytest.raises(SystemExit) as error:
        compare.main(["--report-only", *_replaced(_report_argv(tmp_path), "--pretrain-seeds",
                                                  "1")])
    assert str(error.value).startswith("error: --report-only: --objectives taco → mlm taco (")
    assert sorted(out.rglob("*")) == before
    compare.main(["--report-only", "--out", str(out)])
    assert "| taco |" in (out / "report.md").read_text()
    compare.main(["--report-only", *ran])
    assert (out / "report.md").is_file()


def test_report_only_with_some_of_the_study_options_takes_the_others_from_the_record(
        tmp_path):
    """--report-only --out OUT with a study option but without those a run needs (--data,
    ...): before, argparse's "the following arguments are required: --data, ..."; now the
    options left out are the record's, one given that differs is the recorded-options error
    naming it, and an OUT without a recorded study is named."""
    from taco_fairseq.cli import compare
    from taco_fairseq.comparison.record import read_record

    out = tmp_path / "out"
    _measured(out)
    ran = [a for a in _report_argv(tmp_path)
           if a not in ("--finetune-search-from", str(tmp_path / "earlier.json"))]
    (out / "command.txt").write_text("taco-compare " + shlex.join(ran) + "\n")
    read_record(out, compare.read_command)
    before = sorted(out.rglob("*"))
    for given, change in (
            (["--max-update", "30"], "--max-update 10 → 30; --warmup-updates 1 → 3"),
            (["--objectives", "taco"], "--objectives mlm taco → taco"),
            (["--", "--num-workers", "2"], "-- --num-workers (unset) → 2")):
        with pytest.raises(SystemExit) as error:
            compare.main(["--report-only", "--out", str(out), *given])
        assert str(error.value).startswith(f"error: --report-only: {change} (recorded in "
                                           f"{out / 'study.json'} → given here)")
        assert sorted(out.rglob("*")) == before
    compare.main(["--report-only", "--out", str(out), "--max-update", "10", "--seeds", "1",
                  "--jobs", "2"])
    assert (out / "report.md").is_file()

    for missing, message in ((tmp_path / "none", "no study here (no such directory; "),
                             (tmp_path / "unrecorded", "no study.json (nor the command.txt ")):
        if missing.name == "unrecorded":
            _measured(missing)
        with pytest.raises(SystemExit) as error:
            compare.main(["--report-only", "--out", str(missing), "--max-update", "30"])
        assert str(error.value).startswith(f"error: --out {missing}: {message}")


def _reference(tmp_path, seeds=(1, 2)):
    """A study's --out as its report leaves it: mlm and taco of ``seeds`` at 0 and 10
    updates in checkpoints.csv, and its command as an older taco-compare recorded it."""
    from taco_fairseq.comparison.tables import write_checkpoints_csv

    _measured(tmp_path / "study", seeds=seeds)
    rows = [json.loads(p.read_text()) for p in (tmp_path / "study" / "measures").iterdir()]
    write_checkpoints_csv(rows, tmp_path / "study" / "checkpoints.csv")
    (tmp_path / "study" / "command.txt").write_text("taco-compare --out study\n")
    return tmp_path / "study"


def test_report_only_of_the_recorded_study_takes_the_reference_given(tmp_path, capsys):
    """--report-only --out OUT --reference REF: the recorded control against REF, which is
    checked as with the study's options."""
    from taco_fairseq.cli import compare

    out = tmp_path / "out"
    _measured(out, objectives=("taco",), seeds=(1,))
    ran = _replaced(_report_argv(tmp_path, "--objectives", "taco", "--primary-endpoint",
                                 "probe-average"), "--pretrain-seeds", "1")
    (out / "command.txt").write_text("taco-compare " + shlex.join(ran) + "\n")
    with pytest.raises(SystemExit) as error:
        compare.main(["--report-only", "--out", str(out), "--reference", str(out)])
    assert error.value.code == 2
    assert f"error: --reference {out} is --out itself" in capsys.readouterr().err
    reference = _reference(tmp_path)
    compare.main(["--report-only", "--out", str(out), "--reference", str(reference)])
    report = (out / "report.md").read_text()
    assert f"## Against {reference} (description, no test)" in report
    assert "Reference command: `taco-compare --out study`" in report


def test_a_control_report_describes_its_runs_against_a_reference_study(tmp_path):
    """PLAN.md's control 4: --objectives taco only, read against the study's taco-seed1 and
    mlm-seed1 (--reference): a description per measure and checkpoint, no test."""
    from taco_fairseq.cli import compare

    reference = _reference(tmp_path)
    _measured(tmp_path / "out", objectives=("taco",), seeds=(1,))
    compare.main(["--report-only", "--reference", str(reference),
                  *_report_argv(tmp_path, "--objectives", "taco", "--pretrain-seeds", "1",
                                "--primary-endpoint", "probe-average")])
    report = (tmp_path / "out" / "report.md").read_text()
    section = report.split(f"## Against {reference} (description, no test)")[1]
    same, other = section.split("### this study's taco − the reference's taco")[1].split(
        "### this study's taco − the reference's mlm")
    assert "| 10 | probe_average | 1 | 56.2500 | 56.2500 | +0.0000 |  | - | - | description " \
        "(n = 1): no test |" in same
    assert "| 10 | probe_average | 1 | 51.0000 | 56.2500 | +5.2500 |" in other
    assert "| 10 | valid_mlm_loss | 1 | 9.0000 | 7.9000 | -1.1000 |" in other
    assert "Reference command: `taco-compare --out study`" in section


def test_a_reference_of_identical_runs_differs_by_zero(tmp_path):
    """This study against a reference that is itself (its rounded CSVs): every difference is
    +0.0000 (+0.00 for fine-tuning), not the rounding error of the CSVs (before: -0.0000 where
    a value rounded up, e.g. 56.24996 against the CSV's 56.2500)."""
    from taco_fairseq.comparison.report import reference_section
    from taco_fairseq.comparison.tables import (
        read_reference,
        write_checkpoints_csv,
        write_summary_csv,
    )
    from taco_fairseq.comparison.statistics import MeasureTable, Score, ScoreTable

    rows = [{"objective": o, "pretrain_seed": p, "updates": u, "valid_mlm_loss": 9 - p / 3,
             "probe_average": 56.24996 + p / 7 + (o == "taco") / 3}
            for o in ("mlm", "taco") for p in (1, 2) for u in (0, 10)]
    scores = [Score(o, p, 10, "RTE", s, "accuracy", 60.004996 + p / 7 + s / 3, "accuracy",
                    60.0 + p) for o in ("mlm", "taco") for p in (1, 2) for s in (1, 2)]
    (tmp_path / "ref").mkdir()
    write_checkpoints_csv(rows, tmp_path / "ref" / "checkpoints.csv")
    write_summary_csv(scores, tmp_path / "ref" / "summary.csv")
    section = "\n".join(reference_section(MeasureTable(rows), ScoreTable(scores),
                                          read_reference(tmp_path / "ref", [1, 2], [10])))
    differences = [line.split(" | ")[5] for line in section.splitlines()
                   if line.startswith("| ") and " | 2 | " in line]
    taco = section.split("### this study's taco − the reference's taco")[1].split("###")[0]
    assert taco.count("| 2 |") == 5  # probe_average, valid_mlm_loss at 0 and 10; RTE at 10
    same = [line.split(" | ")[5] for line in taco.splitlines() if line.startswith("| ")
            and " | 2 | " in line]
    assert same == ["+0.0000"] * 4 + ["+0.00"], taco
    assert not [d for d in differences if d.startswith("-0.0")], section


@pytest.mark.parametrize("extra, itself, message", [
    (["--pretrain-seeds", "3"], False, "its checkpoints.csv has pre-training seed(s) 1, 2, not 3 "
                                       "of --pretrain-seeds 3"),
    (["--pretrain-seeds", "1", "--checkpoint-updates", "5"], False,
     "its checkpoints.csv has checkpoints at 10, none at --checkpoint-updates 5"),
    (["--pretrain-seeds", "1"], True, "is --out itself"),
])
def test_a_reference_that_does_not_fit_is_an_error_in_one_line(tmp_path, capsys, extra, itself,
                                                                 message):
    from taco_fairseq.cli import compare

    reference = tmp_path / "out" if itself else _reference(tmp_path)
    with pytest.raises(SystemExit) as error:
        compare.main(["--report-only", "--reference", str(reference),
                      *_report_argv(tmp_path, "--objectives", "taco", *extra)])
    assert error.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert f"error: --reference {reference}" in err[-1] and message in err[-1]
    assert len([line for line in err if "error:" in line]) == 1


def test_each_checkpoint_is_measured_as_soon_as_it_is_saved(monkeypatch, tmp_path):
    """Phase 1 calls the measure with the initializations first, then again each time a run
    has saved a kept checkpoint, while the runs go on; an unkept one (5) is not measured."""
    import threading

    from taco_fairseq.comparison import study

    settings = PretrainSettings(tmp_path, "roberta_tiny", 20, (10, 20), warmup_updates=1)
    options = study.StudyOptions(
        out=tmp_path, objectives=["mlm"], pretrain_seeds=[1], settings=settings,
        glue_data=tmp_path, tasks=[], seeds=[], points=[], jobs=1)
    run_dir = tmp_path / "pretrain" / "mlm-seed1"
    saved = {u: threading.Event() for u in (5, 10, 20)}
    measured = []

    def fake_pretrain(run, settings, out, source_running=None):
        for updates, event in saved.items():
            (run_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
            (run_dir / "checkpoints" / f"checkpoint_1_{updates}.pt").write_bytes(b"")
            assert event.wait(10), "the measure did not see the checkpoint while training"
        return run_dir

    def fake_initialization(run, settings, run_dir):
        run_dir.mkdir(parents=True, exist_ok=True)
        return run_dir / "initialization.pt"

    def measure(found):
        measured.append([c.updates for c in found])
        for updates in (5, 10, 20):  # the run goes on once a checkpoint was looked at
            if updates <= max(c.updates for c in found) + 5:
                saved[updates].set()

    monkeypatch.setattr(study, "pretrain", fake_pretrain)
    monkeypatch.setattr(study, "save_initialization", fake_initialization)
    monkeypatch.setattr(study, "POLL_SECONDS", 0.05)
    study.pretrain_all(options, measure)
    assert measured[0][0] == 0  # the initialization first
    assert measured[-1] == [0, 10, 20] and all(5 not in m for m in measured)
    assert any(m == [0, 10] for m in measured)  # 10 measured before 20 was saved


def test_an_objective_stopped_early_runs_on_the_shared_schedule(tmp_path):
    settings = PretrainSettings(SHARED, "roberta_tiny", 40, (10, 20, 40), warmup_updates=1,
                                objective_max_update=(("taco", 20),))
    taco = pretrain_args(PretrainRun("taco", 1), settings, tmp_path)
    mlm = pretrain_args(PretrainRun("mlm", 1), settings, tmp_path)
    value = lambda args, name: args[args.index(name) + 1]
    assert (value(taco, "--max-update"), value(taco, "--total-num-update")) == ("20", "40")
    assert (value(mlm, "--max-update"), value(mlm, "--total-num-update")) == ("40", "40")
    assert settings.checkpoint_updates_of("taco") == (10, 20)
    assert settings.checkpoint_updates_of("mlm") == (10, 20, 40)
    with pytest.raises(ValueError, match="taco=15: 15 is not among --checkpoint-updates"):
        PretrainSettings(SHARED, "roberta_tiny", 40, (10, 40), warmup_updates=1,
                         objective_max_update=(("taco", 15),))
    with pytest.raises(ValueError, match="not below --max-update 40"):
        PretrainSettings(SHARED, "roberta_tiny", 40, (10, 40), warmup_updates=1,
                         objective_max_update=(("taco", 40),))


@pytest.mark.parametrize("extra, message", [
    (["--objective-max-update", "bert=5"], "bert is not among the runs' objectives mlm taco"),
    (["--objective-max-update", "taco"], "expected OBJECTIVE=N with N >= 1, got 'taco'"),
    (["--conllu-train", "x.conllu"], "--conllu-train and --conllu-test go together"),
    (["--primary-endpoint", "pos-ambiguous", "--probe-tasks", "RTE"],
     "--primary-endpoint pos-ambiguous without --conllu-train/--conllu-test"),
    (["--heldout-mlm-text", "wiki text=a.txt"], "expected NAME=FILE with a NAME of letters"),
    (["--heldout-mlm-text", "w=no-such.txt"], "--heldout-mlm-text: no such file: no-such.txt"),
    (["--conllu-train", "no-such.conllu", "--conllu-test", "no-such.conllu"],
     "--conllu-train: no-such.conllu: no such CoNLL-U file"),
])
def test_the_new_study_options_are_checked_before_anything_runs(tmp_path, capsys, extra,
                                                                message):
    from taco_fairseq.cli import compare

    with pytest.raises(SystemExit):
        compare.parse_options(_search_argv(tmp_path, "--primary-endpoint", "probe-average",
                                           "--probe-tasks", "RTE", *extra))
    assert message in capsys.readouterr().err.strip().splitlines()[-1]


def test_a_primary_endpoint_compares_each_objective_at_its_last_checkpoint():
    """--objective-max-update taco=7000: TACO's 7,000 against MLM's 20,000 updates, paired by
    seed; the equal-updates family of the measure keeps its 7,000 and 20,000 comparisons."""
    from taco_fairseq.comparison.statistics import (MeasureTable, PrimaryEndpoint,
                                                    measure_comparisons)

    rows = [{"objective": o, "pretrain_seed": s, "updates": u,
             "pos_accuracy_ambiguous": 60.0 + s + (u / 1000 if o == "mlm" else u / 500)}
            for o, us in (("mlm", (7000, 20000)), ("taco", (7000,))) for s in (1, 2, 3)
            for u in us]
    table = MeasureTable(rows)
    primary = PrimaryEndpoint("pos-ambiguous", 20000, seeds=(1, 2, 3),
                              updates_of=(("taco", 7000),))
    assert primary.label("taco", "mlm") == "taco@7000 − mlm@20000"
    test = primary.test(None, table, "taco", "mlm")
    assert test.n == 3 and test.difference == pytest.approx(14.0 - 20.0)
    assert "each objective's last checkpoint (taco 7000" in primary.describe()
    family = measure_comparisons(table, "pos_accuracy_ambiguous", "taco", "mlm", primary)
    assert [c.updates for c in family] == [7000]  # equal updates only; the endpoint is apart
    with pytest.raises(ValueError, match="glue-average with --objective-max-update"):
        PrimaryEndpoint("glue-average", 20000, ("RTE",), updates_of=(("taco", 7000),))


def test_a_failed_measure_lets_the_pretrainings_finish_then_raises(monkeypatch, tmp_path):
    from taco_fairseq.comparison import study

    settings = PretrainSettings(tmp_path, "roberta_tiny", 20, (20,), warmup_updates=1)
    options = study.StudyOptions(
        out=tmp_path, objectives=["mlm", "taco"], pretrain_seeds=[1], settings=settings,
        glue_data=tmp_path, tasks=[], seeds=[], points=[], jobs=2)
    trained, calls = [], []

    def fake_pretrain(run, settings, out, source_running=None):
        trained.append(run.name)
        return tmp_path

    def fake_initialization(run, settings, run_dir):
        return run_dir / "initialization.pt"

    def measure(found):
        calls.append(len(found))
        raise ValueError("a broken measure")

    monkeypatch.setattr(study, "pretrain", fake_pretrain)
    monkeypatch.setattr(study, "save_initialization", fake_initialization)
    with pytest.raises(ValueError, match="a broken measure"):
        study.pretrain_all(options, measure)
    assert sorted(trained) == ["mlm-seed1", "taco-seed1"] and calls == [2]


# --- the study's record (OUT/study.json) and the command.txt of older studies ------------------
def test_a_record_holds_every_option_of_the_study_and_reads_back_as_written(tmp_path):
    """study.json: every field of StudyOptions and PretrainSettings but the call's (out, jobs,
    reference) and the checkout's (recipes_dir), read back to the same options."""
    from taco_fairseq.comparison.record import STUDY_FILE, StudyRecord, read_record, study_values
    from taco_fairseq.comparison.study import StudyOptions
    from taco_fairseq.glue.recipes import Hyperparameters

    out = tmp_path / "out"
    out.mkdir()
    options = StudyOptions(
        out=out, objectives=["mlm", "taco"], pretrain_seeds=[1, 2],
        settings=PretrainSettings(tmp_path / "bin", "roberta_tiny", 20, (10, 20),
                                  objective_max_update=(("taco", 10),), lr=1e-3,
                                  warmup_updates=2, cpu=True, extra=("--num-workers", "0")),
        glue_data=tmp_path / "glue", tasks=["RTE"], seeds=[1, 2],
        points=[Hyperparameters(32, 3e-4, 4), Hyperparameters(32, 1e-3, 4)],
        final_tasks=["STS-B"], primary_endpoint="pos-ambiguous", max_updates={"RTE": 5},
        finetune_args=["--fp16"], heldout_text=[tmp_path / "ab.txt"], heldout_max_lines=30,
        probe_tasks=["RTE", "STS-B"], probe_max_train=400, conllu_train=tmp_path / "dev.conllu",
        conllu_test=tmp_path / "test.conllu", mlm_texts=[("wikitext2", tmp_path / "w.xz")],
        jobs=2, cpu=True, reference=tmp_path / "ref")
    StudyRecord(options, "taco-compare --out out").write()
    data = json.loads((out / STUDY_FILE).read_text())
    assert data["format"] == 1 and data["command"] == "taco-compare --out out"
    recorded = {f.name for f in dataclasses.fields(StudyOptions)} - {"out", "jobs", "reference"}
    assert set(data["options"]) == recorded
    assert set(data["options"]["settings"]) == {
        f.name for f in dataclasses.fields(PretrainSettings)} - {"recipes_dir"}
    assert data["options"]["points"][1] == {"batch_size": 32, "lr": 1e-3, "epochs": 4}
    read = read_record(out, read_command=None)
    assert read.command == "taco-compare --out out" and read.options.out == out
    assert (read.options.jobs, read.options.reference) == (1, None)
    assert read.options.settings.objective_max_update == (("taco", 10),)
    assert read.options.mlm_texts == [("wikitext2", tmp_path / "w.xz")]
    (tmp_path / "again").mkdir()
    StudyRecord(dataclasses.replace(read.options, out=tmp_path / "again"), read.command).write()
    assert (tmp_path / "again" / STUDY_FILE).read_text() == (out / STUDY_FILE).read_text()
    assert study_values(read.options) == study_values(options)
    assert study_values(options)["--objective-max-update"] == ["taco=10"]
    assert study_values(options)["--finetune-lr"] == ["0.0003", "0.001"]
    assert study_values(options)["--heldout-mlm-text"] == [f"wikitext2={tmp_path / 'w.xz'}"]
    assert "--data" not in study_values(options) and "--cpu" not in study_values(options)
    no_warmup = dataclasses.replace(options.settings, warmup_updates=0)
    assert study_values(dataclasses.replace(options, settings=no_warmup))[
        "--warmup-updates"] == ["0"]


@pytest.mark.parametrize("content, message", [
    ("{", "not JSON ("),
    ('{"format": 2, "command": "", "options": {}}', "format 2, not 1: written by another "
                                                     "taco-compare"),
    ('{"format": 1, "command": "c", "options": {"objectives": ["mlm"]}}',
     "options.pretrain_seeds missing"),
    ('{"format": 1, "command": "c", "options": {"objectives": "mlm"}}',
     "options.objectives: expected a list, got 'mlm'"),
])
def test_a_record_that_cannot_be_read_is_named_with_what_to_do(tmp_path, content, message):
    from taco_fairseq.comparison.record import read_record

    (tmp_path / "study.json").write_text(content)
    with pytest.raises(ValueError) as error:
        read_record(tmp_path, read_command=None)
    assert str(error.value).startswith(f"{tmp_path / 'study.json'}: {message}")
    assert "rerun the study's command" in str(error.value) or "that one" in str(error.value)


def _commands_of_the_reported_studies():
    """The ``Command:`` line of every report under docs/results: the command.txt of the
    studies on disk (an older taco-compare's, some of scripts/compare_objectives.py)."""
    commands = {}
    for report in sorted((REPO / "docs" / "results").rglob("report.md")):
        line = next(line for line in report.read_text().splitlines()
                    if line.startswith("Command: `"))
        commands[str(report.parent.relative_to(REPO / "docs" / "results"))] = line[10:-1]
    return commands


@pytest.mark.parametrize("study, command", sorted(_commands_of_the_reported_studies().items()))
def test_the_studies_on_disk_are_read_into_a_record_once(tmp_path, study, command):
    """An --out with the command.txt of an older taco-compare (those of docs/results/*) and its
    measures: `--report-only --out OUT` reads the command into study.json, which a later call
    reads (command.txt no longer), and reports the study under that command."""
    from taco_fairseq.cli import compare
    from taco_fairseq.comparison.record import read_record, study_values

    out = tmp_path / "out"
    words = shlex.split(command)
    objectives = words[words.index("--objectives") + 1:][:1] if "--objectives" in words else [
        "mlm", "taco"]
    _measured(out, objectives=objectives, seeds=(1,))
    (out / "command.txt").write_text(command + "\n")
    record = read_record(out, compare.read_command)
    assert (out / "study.json").is_file() and record.command == command
    assert record.options.settings.arch == "roberta_tiny" and record.options.out == out
    assert list(record.options.objectives) == objectives or "--objectives" in words
    (out / "command.txt").write_text("not read again\n")
    again = read_record(out, compare.read_command)
    assert again.command == command and study_values(again.options) == study_values(
        record.options)
    if study == "study5":  # the primary endpoint study, reported with --out alone
        compare.main(["--report-only", "--out", str(out)])
        report = (out / "report.md").read_text()
        assert f"\nCommand: `{command}`\n" in report
        assert "## Primary endpoint: the average of the frozen-encoder linear probes" in report
        assert record.options.primary_endpoint == "probe-average"
        assert list(record.options.pretrain_seeds) == [1, 2, 3, 4, 5]
        assert [p.label for p in record.options.points] == [
            "bs32_lr0.0001_ep4", "bs32_lr0.0003_ep4", "bs32_lr0.001_ep4"]


def test_a_command_txt_that_is_no_command_is_named(tmp_path):
    from taco_fairseq.cli import compare
    from taco_fairseq.comparison.record import read_record

    (tmp_path / "command.txt").write_text("taco-compare --out x --max-update 3\n")
    with pytest.raises(ValueError) as error:
        read_record(tmp_path, compare.read_command)
    assert str(error.value).startswith(
        f"{tmp_path / 'command.txt'}: not a taco-compare command this one reads (the following "
        "arguments are required: --data, --glue-data, --arch, --checkpoint-updates), so the "
        "study's options are unknown; give the --out of a taco-compare study, or remove ")
    assert not (tmp_path / "study.json").exists()


def _pos_study_env(tmp_path):
    """DATA, GLUE, OUT and SHARED of docs/results/pos-study/run.sh in ``tmp_path``, with inputs
    that pass the checks taco-compare makes before anything runs."""
    import lzma

    env = {name: str(tmp_path / name.lower()) for name in ("DATA", "GLUE", "OUT", "SHARED")}
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "dict.txt").write_text("a 1\n")
    for task in ("RTE", "MRPC", "CoLA", "STS-B", "SST-2"):
        (tmp_path / "glue" / task / "input0").mkdir(parents=True)
        (tmp_path / "glue" / task / "prep_info.json").write_text("{}")
        (tmp_path / "glue" / task / "input0" / "dict.txt").write_text("a 1\n")
    shared = tmp_path / "shared" / "data"
    for name in ("corpus/wikitext-2-raw/wiki.test.raw.xz", "corpus/books/pg1342.txt.xz",
                 "corpus/wikipedia-en-2015-wikiextractor/AB.txt.xz"):
        (shared / name).parent.mkdir(parents=True, exist_ok=True)
        with lzma.open(shared / name, "wt") as f:
            f.write("The cat sat on the mat. It was a sunny day.\n")
    (shared / "ud-english-ewt").mkdir()
    for split in ("dev", "test"):
        (shared / "ud-english-ewt" / f"en_ewt-ud-{split}.conllu").write_text(
            "# text = Cats sleep.\n1\tCats\tcat\tNOUN\t_\t_\t2\tnsubj\t_\t_\n"
            "2\tsleep\tsleep\tVERB\t_\t_\t0\troot\t_\tSpaceAfter=No\n"
            "3\t.\t.\tPUNCT\t_\t_\t2\tpunct\t_\t_\n\n")
    (tmp_path / "out").mkdir()
    return env


def _pos_study_calls(tmp_path, env, *runs):
    """The taco-compare arguments of each call `bash docs/results/pos-study/run.sh RUNS...`
    makes with ``env``: run.sh itself, in a copy of the checkout whose .venv/bin/taco-compare
    records its arguments (and whose .venv/bin/python, for rows.py, only makes the part's
    directory)."""
    import os
    import subprocess
    import sys

    checkout = tmp_path / "checkout"
    script = checkout / "docs" / "results" / "pos-study" / "run.sh"
    script.parent.mkdir(parents=True)
    script.write_text((REPO / "docs" / "results" / "pos-study" / "run.sh").read_text())
    (checkout / ".venv" / "bin").mkdir(parents=True)
    calls = tmp_path / "calls.jsonl"
    (checkout / ".venv" / "bin" / "taco-compare").write_text(
        f"#!/bin/sh\nexec {sys.executable} -c 'import json, sys; "
        f"open(sys.argv[1], \"a\").write(json.dumps(sys.argv[2:]) + \"\\n\")' {calls} \"$@\"\n")
    (checkout / ".venv" / "bin" / "python").write_text('#!/bin/sh\nmkdir -p "$3"\n')
    for tool in ("taco-compare", "python"):
        (checkout / ".venv" / "bin" / tool).chmod(0o755)
    done = subprocess.run(["bash", str(script), *runs], env={**os.environ, **env},
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return sorted(json.loads(line) for line in calls.read_text().splitlines())


def _pos_study_measures(out, runs=(("mlm", 20000), ("taco", 7000)), seeds=range(1, 6)):
    """Part-of-speech measures of every run's initialization and last checkpoint in
    OUT/measures, as phase 2 writes them; returns the rows."""
    rows = [{"objective": o, "pretrain_seed": p, "updates": u, "valid_mlm_loss": 9.0,
             "pos_accuracy_ambiguous": 60.0 + p + u / 1000}
            for o, last in runs for p in seeds for u in (0, last)]
    (out / "measures").mkdir(parents=True, exist_ok=True)
    for row in rows:
        (out / "measures" / f"{row['objective']}-seed{row['pretrain_seed']}@{row['updates']}"
         ".json").write_text(json.dumps(row))
    return rows


#: The pos-study's command as the older taco-compare recorded it in OUT/pos-study/command.txt
#: (from run.sh as it was on 2026-12-05, its options in another order than run.sh's now).
POS_STUDY_COMMAND = (
    "taco-compare --data $DATA --glue-data $GLUE --out $OUT/pos-study --arch roberta_tiny "
    "--max-update 20000 --objective-max-update taco=7000 --checkpoint-updates 500 1000 1500 "
    "2000 3000 4000 6000 7000 10000 14000 20000 --lr 1e-3 --warmup-updates 600 "
    "--pretrain-seeds 1 2 3 4 5 --probe-tasks RTE MRPC CoLA STS-B SST-2 --primary-endpoint "
    "pos-ambiguous --conllu-train $SHARED/data/ud-english-ewt/en_ewt-ud-dev.conllu "
    "--conllu-test $SHARED/data/ud-english-ewt/en_ewt-ud-test.conllu --heldout-mlm-text "
    "wikitext2=$SHARED/data/corpus/wikitext-2-raw/wiki.test.raw.xz "
    "book=$SHARED/data/corpus/books/pg1342.txt.xz --heldout-text "
    "$SHARED/data/corpus/wikipedia-en-2015-wikiextractor/AB.txt.xz --heldout-max-lines 3000 "
    "--jobs 2 --cpu -- --num-workers 0")


@pytest.mark.parametrize("recorded", ["as run.sh runs it", "as it was started"])
def test_the_pos_study_started_by_the_older_taco_compare_continues(monkeypatch, tmp_path,
                                                                   recorded):
    """The part-of-speech study was started by a taco-compare that recorded its command in
    OUT/pos-study/command.txt (`taco-compare ARGS`; started from an older run.sh, whose options
    came in another order); `bash docs/results/pos-study/run.sh` with this one continues it:
    the same options, so nothing refuses it, the phases run with them, and study.json records
    them, read back the same; its report follows with --out alone."""
    import string

    from taco_fairseq.cli import compare
    from taco_fairseq.comparison import run
    from taco_fairseq.comparison.record import read_record, study_values

    env = _pos_study_env(tmp_path)
    (argv,) = _pos_study_calls(tmp_path, env)
    assert argv[-3:] == ["--", "--num-workers", "0"] and "--primary-endpoint" in argv
    out = tmp_path / "out" / "pos-study"
    assert argv[argv.index("--out") + 1] == str(out)
    out.mkdir()
    command = ("taco-compare " + shlex.join(argv) if recorded == "as run.sh runs it" else
               string.Template(POS_STUDY_COMMAND).substitute(env))
    (out / "command.txt").write_text(command + "\n")  # as the older taco-compare wrote it
    measures = _pos_study_measures(out)
    ran = []
    monkeypatch.setattr(run, "run_phases",
                        lambda options, timer: ran.append(options) or (measures, []))
    compare.main(argv)
    (options,) = ran
    assert options.primary_endpoint == "pos-ambiguous"
    assert options.settings.objective_max_update == (("taco", 7000),)
    assert list(options.pretrain_seeds) == [1, 2, 3, 4, 5] and options.settings.lr == 1e-3
    recorded = read_record(out, compare.read_command)
    assert recorded.command == "taco-compare " + shlex.join(argv)
    assert study_values(recorded.options) == study_values(options) == study_values(
        compare.read_command(command))
    assert "## Primary endpoint" in (out / "report.md").read_text()

    compare.main(["--report-only", "--out", str(out)])
    report = (out / "report.md").read_text()
    assert f"\nCommand: `{recorded.command}`\n" in report and "## Primary endpoint" in report
    compare.main(["--report-only", *argv])  # the whole command: the same study
    compare.main(argv)  # and again, from study.json
    assert len(ran) == 2 and study_values(ran[1]) == study_values(options)


def test_the_parts_of_the_pos_study_started_by_the_older_taco_compare_continue(monkeypatch,
                                                                              tmp_path):
    """`run.sh mlm-seed2 taco-seed3`: each run a study of its own in OUT/pos-study-parts/RUN;
    a part whose command.txt the older taco-compare wrote continues under this one."""
    from taco_fairseq.cli import compare
    from taco_fairseq.comparison import run
    from taco_fairseq.comparison.record import read_record

    env = _pos_study_env(tmp_path)
    calls = _pos_study_calls(tmp_path, env, "mlm-seed2", "taco-seed3")
    ran = []
    for argv in calls:
        out = Path(argv[argv.index("--out") + 1])
        objective = argv[argv.index("--objectives") + 1]
        (out / "command.txt").write_text("taco-compare " + shlex.join(argv) + "\n")
        measures = _pos_study_measures(out, [(objective, {"mlm": 20000, "taco": 7000}[
            objective])], [int(argv[argv.index("--pretrain-seeds") + 1])])
        monkeypatch.setattr(run, "run_phases",
                            lambda options, timer: ran.append(options) or (measures, []))
        compare.main(argv)
        assert read_record(out, compare.read_command).command == "taco-compare " + shlex.join(
            argv)
    assert sorted((list(o.objectives), list(o.pretrain_seeds), o.settings.objective_max_update)
                  for o in ran) == [(["mlm"], [2], ()), (["taco"], [3], (("taco", 7000),))]
