"""Reading GLUE TSV files: quotes kept, columns by layout, malformed rows counted."""

import pytest

from taco_fairseq.glue.tasks import EVAL_COLUMNS, TASKS, get_task
from taco_fairseq.glue.tsv import read_split

RTE = get_task("RTE")


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def test_quotes_stay_in_sentences_and_rows_stay_aligned(tmp_path):
    path = write(tmp_path / "train.tsv", (
        "index\tsentence1\tsentence2\tlabel\n"
        '0\t"Unbalanced quote opens\tand "another\tentailment\n'
        '1\tplain\t"quoted" tail\tnot_entailment\n'
    ))
    data = read_split(path, RTE.splits["train"], RTE.labels)
    assert data.inputs == [('"Unbalanced quote opens', 'and "another'),
                           ("plain", '"quoted" tail')]
    assert data.labels == ["entailment", "not_entailment"]
    assert data.indices == ["0", "1"] and not data.malformed


def test_malformed_rows_are_counted_with_line_numbers(tmp_path):
    path = write(tmp_path / "dev.tsv", (
        "index\tsentence1\tsentence2\tlabel\n"
        "0\ta\tb\tentailment\n"
        "1\tmissing a column\tentailment\n"        # 3 fields
        "2\ta\tb\t\n"                              # empty label
        "3\ta\tb\tcontradiction\n"                 # not an RTE label
        "4\ta\textra\ttab\tentailment\n"           # 5 fields
        "5\t\tb\tnot_entailment\n"                 # empty input: kept, counted
    ))
    data = read_split(path, RTE.splits["valid"], RTE.labels)
    assert [m.line for m in data.malformed] == [3, 4, 5, 6]
    assert "3 tab-separated fields, expected 4" in data.malformed[0].reason
    assert "'' is not one of" in data.malformed[1].reason
    assert "'contradiction'" in data.malformed[2].reason
    assert data.labels == ["entailment", "not_entailment"]
    assert data.indices == ["0", "5"]  # row numbers of the file, malformed rows counted
    assert data.empty_inputs == 1


def test_headerless_cola_bom_mrpc_and_stsb_scores(tmp_path):
    cola = get_task("CoLA")
    data = read_split(write(tmp_path / "cola.tsv", "gj04\t1\t\tIt's \"fine\".\nx\t0\t*\tBad\n"),
                      cola.splits["train"], cola.labels)
    assert data.inputs == [("It's \"fine\".",), ("Bad",)] and data.labels == ["1", "0"]

    mrpc = get_task("MRPC")
    text = "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t7\t8\tA .\tB .\n"
    data = read_split(write(tmp_path / "mrpc.tsv", text), mrpc.splits["train"], mrpc.labels)
    assert data.inputs == [("A .", "B .")] and data.labels == ["1"]

    stsb = get_task("STS-B")
    head = "\t".join(stsb.splits["valid"].columns) + "\n"
    rows = "0\tg\tf\ty\t1\tn\tn\tA\tB\t3.800\n1\tg\tf\ty\t2\tn\tn\tA\tB\tnan\n"
    data = read_split(write(tmp_path / "sts.tsv", head + rows), stsb.splits["valid"], None)
    assert data.labels == ["3.800"] and "is not a number" in data.malformed[0].reason


def test_test_files_keep_glue_indices(tmp_path):
    qqp = get_task("QQP")
    data = read_split(write(tmp_path / "test.tsv", "id\tquestion1\tquestion2\n17\tA?\tB?\n"),
                      qqp.splits["test"], qqp.labels)
    assert data.indices == ["17"] and data.labels is None and data.inputs == [("A?", "B?")]


def test_wrong_header_is_an_error_naming_both_layouts(tmp_path):
    path = write(tmp_path / "train.tsv", "sentence1\tsentence2\tlabel\na\tb\tentailment\n")
    with pytest.raises(ValueError, match="not the original GLUE layout"):
        read_split(path, RTE.splits["train"], RTE.labels)
    with pytest.raises(FileNotFoundError):
        read_split(tmp_path / "missing.tsv", RTE.splits["train"], RTE.labels)


def test_task_table():
    assert list(TASKS) == ["MNLI", "QNLI", "QQP", "RTE", "SST-2", "MRPC", "CoLA", "STS-B"]
    assert EVAL_COLUMNS == ("MNLI-m", "MNLI-mm", "QNLI", "QQP", "RTE", "SST-2", "MRPC", "CoLA",
                            "STS-B")
    assert get_task("sst_2").name == "SST-2" and get_task("stsb").name == "STS-B"
    with pytest.raises(ValueError, match="WNLI is excluded"):
        get_task("WNLI")
    paper = {t: TASKS[t].paper_metric for t in TASKS}
    assert paper == {"MNLI": "accuracy", "QNLI": "accuracy", "QQP": "f1", "RTE": "accuracy",
                     "SST-2": "accuracy", "MRPC": "f1", "CoLA": "accuracy",
                     "STS-B": "spearman"}
    assert TASKS["CoLA"].glue_metric == "mcc"
    assert TASKS["STS-B"].regression and TASKS["STS-B"].num_classes == 1
