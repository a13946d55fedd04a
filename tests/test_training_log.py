"""Reading metrics back from fairseq json logs."""

import pytest

from taco_fairseq.analysis.training_log import format_table, parse_json_log

LOG = """\
2026-11-29 22:10:44 | INFO | fairseq_cli.train | task: TacoMaskedLMTask
2026-11-29 22:10:45 | INFO | train_inner | {"epoch": 1, "update": 0.013, "loss": "19.372", "mlm_loss": "10.991", "tc_loss": "8.379", "tc_accuracy": "0.0195", "num_updates": "5"}
[2026-11-29 22:19:04,830][train_inner][INFO] - {"epoch": 1, "mlm_loss": "10.7", "tc_loss": "5.2", "num_updates": "10"}
2026-11-29 22:10:47 | INFO | valid | {"epoch": 1, "valid_loss": "14.121", "valid_num_updates": "30"}
not json { at all
"""


def test_parses_plain_and_hydra_records():
    records = parse_json_log(LOG.splitlines())
    assert [r["kind"] for r in records] == ["train_inner", "train_inner", "valid"]
    assert records[0]["tc_loss"] == 8.379 and records[1]["num_updates"] == 10.0
    assert records[2]["valid_loss"] == 14.121


def test_validation_table_reads_fairseqs_prefixed_update_count():
    table = format_table(parse_json_log(LOG.splitlines()), ["valid_loss"], kind="valid")
    assert table.splitlines()[1].split() == ["30", "14.12"]


def test_table_has_a_row_per_record_and_dashes_for_missing_values():
    table = format_table(parse_json_log(LOG.splitlines()), ["mlm_loss", "tc_accuracy"])
    lines = table.splitlines()
    assert lines[0].split() == ["num_updates", "mlm_loss", "tc_accuracy"]
    assert lines[1].split() == ["5", "10.99", "0.0195"]
    assert lines[2].split() == ["10", "10.7", "-"]
    assert len(lines) == 3


def test_updates_logged_again_by_a_resumed_run_are_one_row_with_the_later_record():
    resumed = LOG + LOG.splitlines()[2].replace('"10.7"', '"10.6"') + "\n" + LOG.splitlines()[
        2].replace('"10.7"', '"10.5"').replace('"10"}', '"15"}')
    lines = format_table(parse_json_log(resumed.splitlines()), ["mlm_loss"]).splitlines()
    assert [line.split() for line in lines[1:]] == [["5", "10.99"], ["10", "10.6"],
                                                    ["15", "10.5"]]


def test_the_command_names_metrics_the_log_does_not_have(tmp_path, capsys):
    from taco_fairseq.cli.training_log import main

    log = tmp_path / "train.log"
    log.write_text(LOG.replace(', "tc_loss": "8.379", "tc_accuracy": "0.0195"', "")
                   .replace(', "tc_loss": "5.2"', ""))  # an mlm run: no TC metrics
    main([str(log)])
    assert capsys.readouterr().out.splitlines()[0].split() == ["num_updates", "mlm_loss"]
    with pytest.raises(SystemExit):
        main([str(log), "--metrics", "mlm_loss", "tc_acc"])
    error = capsys.readouterr().err
    assert "--metrics tc_acc: not in the train_inner records" in error and "mlm_loss" in error


def test_validation_table_by_default_shows_the_prefixed_metrics(tmp_path, capsys):
    from taco_fairseq.cli.training_log import main

    log = tmp_path / "train.log"
    log.write_text(LOG.replace('"valid_loss": "14.121"',
                               '"valid_loss": "14.121", "valid_mlm_loss": "9.5"'))
    main([str(log), "--kind", "valid"])
    assert [line.split() for line in capsys.readouterr().out.splitlines()] == [
        ["num_updates", "valid_mlm_loss"], ["30", "9.5"]]


def test_the_online_figure_draws_an_update_logged_twice_once(tmp_path, monkeypatch):
    from taco_fairseq.analysis import figures

    record = ('2026-11-29 22:10:45 | INFO | train_inner | {{"intra_context_cos": "{0}", '
              '"inter_context_cos": "0.1", "contextual_score": "0.2", "num_updates": "{1}"}}')
    first_run = [record.format(0.5, n) for n in (1, 2, 3)]
    resumed = [record.format(0.7, n) for n in (3, 4)]  # resumed from the checkpoint at 2
    drawn = {}
    monkeypatch.setattr(figures, "_finish", lambda fig, axes, path: drawn.update(
        {line.get_label(): (list(line.get_xdata()), list(line.get_ydata()))
         for line in axes[0].get_lines()}))
    figures.plot_online_diagnostics({"run": parse_json_log(first_run + resumed)},
                                    tmp_path / "online.png")
    assert drawn == {"run": ([1, 2, 3, 4], [0.5, 0.5, 0.7, 0.7])}
