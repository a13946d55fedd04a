"""GLUE data prep: the real five tasks keep every row, the official MNLI/QNLI/QQP layouts
work (tiny files written here), bad rows stop it, MRPC's formatting matches GLUE's."""

import json

import pytest
import sentencepiece as spm
from fairseq.binarizer import FileBinarizer, VocabularyDatasetBinarizer
from fairseq.data import Dictionary, data_utils

from conftest import run_script
from taco_fairseq.glue.download import ARCHIVES, download_glue, format_mrpc
from taco_fairseq.glue.databin import (
    GluePrepOptions,
    MalformedRowsError,
    prepare_glue,
    read_indices,
    read_prep_info,
)
from taco_fairseq.glue.tasks import get_task
from taco_fairseq.glue.tsv import read_split

# rows of the GLUE files in ../shared (data/README.md)
ROWS = {"RTE": (2490, 277), "MRPC": (3668, 408), "CoLA": (8551, 1043), "STS-B": (5749, 1500),
        "SST-2": (67349, 872)}
TEST_ROWS = {"RTE": 3000, "MRPC": 1725, "CoLA": 1063, "STS-B": 1379, "SST-2": 1821}


def dataset_rows(prefix):
    return len(data_utils.load_indexed_dataset(str(prefix), None))


def test_real_tasks_keep_every_row(glue_databin):
    for name, (train, valid) in ROWS.items():
        task = get_task(name)
        task_dir = glue_databin / name
        expected = {"train": train, "valid": valid, "test": TEST_ROWS[name]}
        for split, rows in expected.items():
            info = read_prep_info(task_dir)["splits"][split]
            for k in range(task.num_inputs):
                dataset = data_utils.load_indexed_dataset(str(task_dir / f"input{k}" / split), None)
                assert len(dataset) == rows, (name, split, k)
                # tokens as the pre-training prep_info.json counts them: without each row's </s>
                assert info[f"input{k}_tokens"] == int(dataset.sizes.sum()) - rows
            assert len(read_indices(task_dir, split)) == rows
            assert info["rows"] == rows
            assert info["malformed_rows"] == 0
        assert not (task_dir / "input1").exists() or task.num_inputs == 2
        for split in ("train", "valid"):
            if task.regression:
                lines = (task_dir / "label" / f"{split}.label").read_text().splitlines()
                assert len(lines) == expected[split]
            else:
                assert dataset_rows(task_dir / "label" / split) == expected[split]


def test_rows_decode_to_their_tsv_sentences(glue_databin, tiny_databin, glue_data):
    sp = spm.SentencePieceProcessor(model_file=str(tiny_databin / "sentencepiece.bpe.model"))
    dictionary = Dictionary.load(str(glue_databin / "RTE" / "input0" / "dict.txt"))
    sentences = data_utils.load_indexed_dataset(str(glue_databin / "RTE" / "input0" / "train"),
                                                dictionary)
    # RTE train row 2164 starts with an unbalanced quote (line 2166 of the file)
    line = (glue_data / "RTE" / "train.tsv").read_text(encoding="utf-8").splitlines()[2165]
    assert line.split("\t")[0] == "2164" and line.split("\t")[1].startswith('"')
    ids = sentences[2164].tolist()
    assert ids[-1] == dictionary.eos()
    assert sp.decode(ids[:-1]) == sp.decode(sp.encode(line.split("\t")[1]))
    labels = Dictionary.load(str(glue_databin / "RTE" / "label" / "dict.txt"))
    assert labels.symbols[labels.nspecial:] == ["entailment", "not_entailment"]
    gold = data_utils.load_indexed_dataset(str(glue_databin / "RTE" / "label" / "train"), labels)
    assert labels[gold[2164][0]] == line.split("\t")[3]
    stsb = (glue_databin / "STS-B" / "label" / "valid.label").read_text().splitlines()
    assert stsb[0] == "5.000"  # the score text of dev row 0


def _binarize_with_fairseq(lines, dictionary, prefix):
    """The replaced route: the lines as text, binarized by fairseq-preprocess's binarizer."""
    text = prefix.parent / f"{prefix.name}.txt"
    text.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    FileBinarizer.multiprocess_dataset(
        str(text), "mmap", VocabularyDatasetBinarizer(dictionary, append_eos=True),
        str(prefix), vocab_size=len(dictionary),
    )
    return {ext: (prefix.parent / f"{prefix.name}.{ext}").read_bytes() for ext in ("bin", "idx")}


@pytest.mark.slow
def test_same_bytes_as_fairseq_preprocess_of_the_pieces(glue_databin, tiny_databin, glue_data,
                                                      tmp_path):
    """Every input and label dataset of the five real tasks, against fairseq's binarizer run
    on the sentences' SentencePiece pieces and on the label names."""
    sp = spm.SentencePieceProcessor(model_file=str(tiny_databin / "sentencepiece.bpe.model"))
    dictionary = Dictionary.load(str(tiny_databin / "dict.txt"))
    for name in ROWS:
        task = get_task(name)
        task_dir = glue_databin / name
        for split in ("train", "valid", "test"):
            data = read_split(glue_data / name / task.splits[split].file, task.splits[split],
                              task.labels)
            expected = {}
            for k in range(task.num_inputs):
                pieces = sp.encode([row[k] for row in data.inputs], out_type=str)
                expected[f"input{k}"] = _binarize_with_fairseq(
                    [" ".join(p) for p in pieces], dictionary, tmp_path / f"{name}-{split}-{k}")
            if data.labels is not None and not task.regression:
                labels = Dictionary.load(str(task_dir / "label" / "dict.txt"))
                expected["label"] = _binarize_with_fairseq(data.labels, labels,
                                                           tmp_path / f"{name}-{split}-label")
            for key, files in expected.items():
                for ext, content in files.items():
                    assert (task_dir / key / f"{split}.{ext}").read_bytes() == content, (
                        name, split, key, ext)


MNLI_TEST = ("index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\t"
             "sentence1_parse\tsentence2_parse\tsentence1\tsentence2")


def mnli_row(i, s1, s2, labels=()):
    return "\t".join([str(i), "1", f"{i}e", "fiction", "( x )", "( y )", "(ROOT x)", "(ROOT y)",
                      s1, s2, *labels])


def write_official_layouts(root):
    """Tiny MNLI, QNLI and QQP directories in the official GLUE column layout."""
    mnli = root / "MNLI"
    mnli.mkdir(parents=True)
    (mnli / "train.tsv").write_text("\n".join([
        MNLI_TEST + "\tlabel1\tgold_label",
        mnli_row(0, 'He said "no.', "He refused.", ["entailment", "entailment"]),
        mnli_row(1, "Cats sleep.", "Dogs bark.", ["neutral", "neutral"]),
        mnli_row(2, "It is red.", "It is blue.", ["contradiction", "contradiction"]),
    ]) + "\n")
    dev_head = MNLI_TEST + "\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label"
    for name, n in (("dev_matched", 2), ("dev_mismatched", 3)):
        rows = [mnli_row(i, f"Premise {i}.", f"Hypothesis {i}.",
                         ["neutral"] * 5 + ["entailment" if i else "neutral"]) for i in range(n)]
        (mnli / f"{name}.tsv").write_text("\n".join([dev_head, *rows]) + "\n")
    for name, n in (("test_matched", 2), ("test_mismatched", 1)):
        rows = [mnli_row(i, f"Test premise {i}.", f"Test hypothesis {i}.") for i in range(n)]
        (mnli / f"{name}.tsv").write_text("\n".join([MNLI_TEST, *rows]) + "\n")

    qnli = root / "QNLI"
    qnli.mkdir()
    (qnli / "train.tsv").write_text("index\tquestion\tsentence\tlabel\n"
                                    "0\tWho?\tHe did.\tentailment\n"
                                    "1\tWhen?\tRed.\tnot_entailment\n")
    (qnli / "dev.tsv").write_text("index\tquestion\tsentence\tlabel\n"
                                  "0\tWhy?\tBecause.\tentailment\n")
    (qnli / "test.tsv").write_text("index\tquestion\tsentence\n0\tHow?\tSo.\n")

    qqp = root / "QQP"
    qqp.mkdir()
    head = "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
    (qqp / "train.tsv").write_text(head + "5\t1\t2\tHow do I cook?\tHow to cook?\t1\n"
                                   "9\t3\t4\tWhat is \"AI\"?\tWho won?\t0\n")
    (qqp / "dev.tsv").write_text(head + "11\t5\t6\tA?\tB?\t0\n")
    (qqp / "test.tsv").write_text("id\tquestion1\tquestion2\n0\tC?\tD?\n1\tE?\tF?\n")


def test_official_mnli_qnli_qqp_layouts(tmp_path, tiny_databin):
    write_official_layouts(tmp_path / "glue")
    infos = prepare_glue(GluePrepOptions(glue_dir=tmp_path / "glue", pretraining_data=tiny_databin,
                                         destdir=tmp_path / "bin", workers=1))
    assert list(infos) == ["MNLI", "QNLI", "QQP"]  # the others are not in the directory
    mnli = tmp_path / "bin" / "MNLI"
    rows = {split: s["rows"] for split, s in infos["MNLI"]["splits"].items()}
    assert rows == {"train": 3, "valid": 2, "test": 2, "valid1": 3, "test1": 1}
    for split, n in rows.items():
        assert dataset_rows(mnli / "input0" / split) == n
        assert dataset_rows(mnli / "input1" / split) == n
    assert dataset_rows(mnli / "label" / "valid1") == 3
    labels = Dictionary.load(str(mnli / "label" / "dict.txt"))
    assert labels.symbols[labels.nspecial:] == ["contradiction", "entailment", "neutral"]
    valid1 = data_utils.load_indexed_dataset(str(mnli / "label" / "valid1"), labels)
    assert [labels[valid1[i][0]] for i in range(3)] == ["neutral", "entailment", "entailment"]
    assert infos["MNLI"]["splits"]["valid1"]["label_counts"] == {
        "contradiction": 0, "entailment": 2, "neutral": 1}
    assert read_indices(tmp_path / "bin" / "QQP", "valid") == ["0"]
    assert read_indices(tmp_path / "bin" / "QQP", "test") == ["0", "1"]
    assert infos["QQP"]["labels"] == ["0", "1"] and infos["QNLI"]["splits"]["test"]["rows"] == 1


def write_rte(root, train_rows, test_rows=("0\tA.\tB.",)):
    rte = root / "RTE"
    rte.mkdir(parents=True)
    head = "index\tsentence1\tsentence2\tlabel\n"
    (rte / "train.tsv").write_text(head + "\n".join(train_rows) + "\n")
    (rte / "dev.tsv").write_text(head + "0\tA.\tB.\tentailment\n")
    (rte / "test.tsv").write_text("index\tsentence1\tsentence2\n" + "\n".join(test_rows) + "\n")


def test_malformed_rows_stop_prep_unless_skipped(tmp_path, tiny_databin):
    write_rte(tmp_path / "glue", ["0\tA.\tB.\tentailment", "1\tonly one sentence\tentailment",
                                  "2\tA.\tB.\t", "3\tC.\tD.\tnot_entailment"])
    options = GluePrepOptions(glue_dir=tmp_path / "glue", pretraining_data=tiny_databin,
                              destdir=tmp_path / "bin", tasks=["RTE"])
    with pytest.raises(MalformedRowsError) as error:
        prepare_glue(options)
    message = str(error.value)
    assert "2 malformed row(s)" in message and "line 3: 3 tab-separated fields" in message
    assert "line 4: label '' is not one of" in message and "--skip-malformed" in message
    assert not (tmp_path / "bin" / "RTE").exists()

    options.skip_malformed = True
    info = prepare_glue(options)["RTE"]
    train = info["splits"]["train"]
    assert train["rows"] == 2 and train["malformed_rows"] == 2 and len(train["malformed"]) == 2
    assert dataset_rows(tmp_path / "bin" / "RTE" / "input0" / "train") == 2
    assert read_indices(tmp_path / "bin" / "RTE", "train") == ["0", "3"]

    with pytest.raises(FileExistsError, match="is not empty; use --force"):
        prepare_glue(options)


def test_malformed_test_rows_are_never_skipped(tmp_path, tiny_databin):
    write_rte(tmp_path / "glue", ["0\tA.\tB.\tentailment"], test_rows=["0\tA.\tB.", "1\tA."])
    options = GluePrepOptions(glue_dir=tmp_path / "glue", pretraining_data=tiny_databin,
                              destdir=tmp_path / "bin", skip_malformed=True)
    with pytest.raises(MalformedRowsError, match="Test rows cannot be skipped"):
        prepare_glue(options)


def test_missing_inputs_are_errors(tmp_path, tiny_databin):
    with pytest.raises(FileNotFoundError, match="--glue-dir .*glue: no such directory"):
        prepare_glue(GluePrepOptions(glue_dir=tmp_path / "glue", pretraining_data=tiny_databin,
                                     destdir=tmp_path / "bin", tasks=["RTE"]))
    write_rte(tmp_path / "glue", ["0\tA.\tB.\tentailment"])
    with pytest.raises(FileNotFoundError, match="no MNLI directory"):
        prepare_glue(GluePrepOptions(glue_dir=tmp_path / "glue", pretraining_data=tiny_databin,
                                     destdir=tmp_path / "bin", tasks=["MNLI"]))
    with pytest.raises(FileNotFoundError, match="sentencepiece.bpe.model"):
        prepare_glue(GluePrepOptions(glue_dir=tmp_path / "glue", pretraining_data=tmp_path,
                                     destdir=tmp_path / "bin"))
    (tmp_path / "glue" / "RTE" / "dev.tsv").unlink()
    with pytest.raises(FileNotFoundError, match="dev.tsv"):
        prepare_glue(GluePrepOptions(glue_dir=tmp_path / "glue", pretraining_data=tiny_databin,
                                     destdir=tmp_path / "bin"))


def test_mrpc_formatting_reproduces_the_glue_files(tmp_path, glue_data):
    """GLUE's MRPC files come from the corpus files; rebuild those from the stored train/dev/
    test files and format them again: the bytes must come back."""
    train = (glue_data / "MRPC" / "train.tsv").read_text(encoding="utf-8").splitlines()
    dev = (glue_data / "MRPC" / "dev.tsv").read_text(encoding="utf-8").splitlines()
    test = (glue_data / "MRPC" / "test.tsv").read_text(encoding="utf-8").splitlines()
    (tmp_path / "msr_paraphrase_train.txt").write_text(
        "\n".join(train + dev[1:]) + "\n", encoding="utf-8")
    (tmp_path / "msr_paraphrase_test.txt").write_text("\n".join(
        [train[0]] + ["0\t" + row.split("\t", 1)[1] for row in test[1:]]) + "\n",
        encoding="utf-8")
    (tmp_path / "dev_ids.tsv").write_text(
        "".join("\t".join(row.split("\t")[1:3]) + "\n" for row in dev[1:]), encoding="utf-8")
    format_mrpc(tmp_path / "msr_paraphrase_train.txt", tmp_path / "msr_paraphrase_test.txt",
                tmp_path / "dev_ids.tsv", tmp_path / "MRPC")
    for name in ("train.tsv", "dev.tsv", "test.tsv"):
        assert (tmp_path / "MRPC" / name).read_bytes() == (glue_data / "MRPC" / name).read_bytes()


def test_download_fails_clearly_offline(tmp_path, monkeypatch):
    # an address that refuses connections at once, whether or not this machine is online
    monkeypatch.setitem(ARCHIVES, "RTE", "http://127.0.0.1:9/RTE.zip")
    with pytest.raises(RuntimeError, match=r"could not download http://127\.0\.0\.1:9/RTE\.zip"):
        download_glue(tmp_path, ["RTE"], timeout=5)
    assert not (tmp_path / "RTE").exists()
    with pytest.raises(ValueError, match="unknown GLUE task"):
        download_glue(tmp_path, ["WNLI"])


@pytest.mark.slow
def test_prep_command(tmp_path, tiny_databin):
    write_official_layouts(tmp_path / "glue")
    result = run_script("prepare_glue.py", "--glue-dir", tmp_path / "glue", "--pretraining-data",
                        tiny_databin, "--destdir", tmp_path / "bin", "--tasks", "QNLI",
                        "--workers", "1")
    assert result.returncode == 0, result.stderr
    assert "QNLI: train 2, valid 1, test 1" in result.stdout
    info = json.loads((tmp_path / "bin" / "QNLI" / "prep_info.json").read_text())
    assert info["dictionary_size"] == len(Dictionary.load(str(tiny_databin / "dict.txt")))


def test_a_checkpoint_directory_is_named_as_such(tmp_path, tiny_databin):
    options = GluePrepOptions(glue_dir=tmp_path / "glue", pretraining_data=tiny_databin,
                              destdir=tmp_path / "bin", checkpoint=tmp_path)
    with pytest.raises(FileNotFoundError, match=f"--checkpoint {tmp_path} is a directory; give a "
                       "checkpoint file in it"):
        prepare_glue(options)
