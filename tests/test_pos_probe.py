"""The part-of-speech probe (analysis/pos_probe.py) and its CoNLL-U reader (analysis/conllu.py)
on the UD English EWT treebank in ../shared, and the masked-LM loss on held-out text
(analysis/masked_lm_loss.py)."""

import dataclasses
import math

import numpy as np
import pytest
import torch

from taco_fairseq.analysis.conllu import CoNLLUError, read_conllu
from taco_fairseq.analysis.pos_probe import (PosProbeData, encode_words, pos_probe,
                                              window_spans, word_states)

from conftest import SHARED

EWT = SHARED / "data" / "ud-english-ewt"


@pytest.fixture(scope="session")
def ewt():
    """The dev and test splits of UD English EWT (CoNLL-U), read in place."""
    dev, test = EWT / "en_ewt-ud-dev.conllu", EWT / "en_ewt-ud-test.conllu"
    if not dev.is_file() or not test.is_file():
        pytest.skip(f"UD English EWT not found in {EWT}")
    return dev, test


def _sentence(path, sent_id):
    return next(s for s in read_conllu(path) if s.sent_id == sent_id)


def test_a_sentence_with_a_multiword_token_and_an_empty_node_is_read_as_conllu_defines(ewt):
    """dev's answers-20111108072305AAPJTjj_ans-0005, checked by hand: ``It's`` (1-2) is the
    words It + 's; the empty node 10.1 (has) is no word; SpaceAfter=No joins ``compact,``."""
    sentence = _sentence(ewt[0], "answers-20111108072305AAPJTjj_ans-0005")
    assert sentence.text == ("It's more compact, ISO 6400 capability (SX40 only 3200), faster "
                             "lens at f/2 and the SX40 only f/2.7.")
    words = [(w.form, w.upos) for w in sentence.words]
    assert words[:6] == [("It", "PRON"), ("'s", "AUX"), ("more", "ADV"), ("compact", "ADJ"),
                         (",", "PUNCT"), ("ISO", "NOUN")]
    assert ("has", "VERB") not in words  # 10.1, an empty node
    assert [w.form for w in sentence.words[8:13]] == ["(", "SX40", "only", "3200", ")"]
    text = sentence.text.encode()
    assert [(w.start, w.end) for w in sentence.words[:5]] == [(0, 2), (2, 4), (5, 9), (10, 17),
                                                              (17, 18)]
    assert all(text[w.start:w.end].decode() == w.form for w in sentence.words)


def test_the_treebank_is_read_whole_and_its_text_rebuilt(ewt):
    """The counts of ../shared/data/README.md (2,001 sentences, 25,147 words in dev; 25,094
    words in test), and the rebuilt text is each dev sentence's ``# text``."""
    dev, test = read_conllu(ewt[0]), read_conllu(ewt[1])
    assert (len(dev), sum(len(s.words) for s in dev)) == (2001, 25147)
    assert sum(len(s.words) for s in test) == 25094
    texts = [line[len("# text = "):].rstrip("\n")
             for line in ewt[0].read_text(encoding="utf-8").splitlines()
             if line.startswith("# text = ")]
    assert [s.text for s in dev] == texts


@pytest.mark.parametrize("content, message", [
    ("1\tword\tword\tNOUN\n\n", ":1: 4 tab-separated columns, CoNLL-U has 10"),
    ("x\tword" + "\t_" * 8 + "\n", ":1: ID 'x' is neither an integer"),
    ("1-2\tdon't" + "\t_" * 8 + "\n1\tdo\tdo\tAUX" + "\t_" * 6 + "\n\n",
     ":2: the sentence ends 1 word(s) short of its last multi-word token"),
    ("# only a comment\n", "no sentence in it"),
])
def test_a_file_that_is_not_conllu_is_named_with_its_line(tmp_path, content, message):
    path = tmp_path / "bad.conllu"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(CoNLLUError, match="bad.conllu") as error:
        read_conllu(path)
    assert message in str(error.value)


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="no-such.conllu"):
        read_conllu(tmp_path / "no-such.conllu")


@pytest.fixture(scope="session")
def trained_and_initial(tiny_databin, tmp_path_factory):
    """An MLM run of the comparison's recipe on ``tiny_databin`` (roberta_tiny, 400 updates of
    16 × 64 tokens, lr 1e-3) and its initialization: (initialization, trained) checkpoints."""
    from taco_fairseq.comparison.pretraining import (PretrainRun, PretrainSettings, checkpoints,
                                                     pretrain, save_initialization)

    out = tmp_path_factory.mktemp("pos_run")
    settings = PretrainSettings(tiny_databin, "roberta_tiny", 400, (400,), tokens_per_sample=64,
                                batch_size=16, lr=1e-3, warmup_updates=40, cpu=True,
                                extra=("--num-workers", "0"))
    run = PretrainRun("mlm", 1)
    run_dir = pretrain(run, settings, out)
    return save_initialization(run, settings, run_dir), checkpoints(run_dir)[400]


def _hub(path, databin):
    from taco_fairseq.analysis.checkpoints import load_checkpoint

    return load_checkpoint(path, databin).hub


@pytest.fixture(scope="session")
def small_ewt(ewt, tmp_path_factory):
    """The first 400 sentences of dev and of test, as CoNLL-U files (read at test time from
    ../shared, written to a temporary directory)."""
    directory = tmp_path_factory.mktemp("ewt")
    paths = []
    for source in ewt:
        blocks = source.read_text(encoding="utf-8").split("\n\n")[:400]
        path = directory / source.name
        path.write_text("\n\n".join(blocks) + "\n\n", encoding="utf-8")
        paths.append(path)
    return PosProbeData.read(*paths)


@pytest.mark.slow
def test_each_word_gets_its_first_piece_and_the_ids_are_hub_encodes(
        ewt, trained_and_initial, tiny_databin):
    hub = _hub(trained_and_initial[1], tiny_databin)
    sentences = read_conllu(ewt[0])[:300]
    encoded = encode_words(sentences, hub.bpe.sp, hub.task.source_dictionary, 64)
    pieces = hub.bpe.sp.encode
    assert any(n > 1 for n in encoded.windows)  # some sentences are windowed at 64
    row = 0
    for sentence, rows, positions, windows in zip(sentences, encoded.rows, encoded.positions,
                                                  encoded.windows):
        if windows == 1:  # it fits: exactly what hub.encode gives
            assert torch.equal(encoded.tokens[row], hub.encode(sentence.text))
        proto = pieces(sentence.text, out_type="proto").pieces
        spans, _ = window_spans(len(proto), 62)
        for word, word_row, position in zip(sentence.words, rows, positions):
            assert position > 0 and row <= word_row < row + windows  # kept, in its sentence
            start = spans[word_row - row][0]
            piece = proto[start + position - 1]  # after <s>
            assert piece.begin < word.end and piece.end > word.start  # overlaps the word
            earlier = proto[: start + position - 1]
            assert not any(p.begin < word.end and p.end > word.start and p.surface.strip()
                           for p in earlier)  # and is the first that does
        row += windows
    assert row == len(encoded.tokens)
    # by hand: "It's more compact, ...": It, 's and more start at their own pieces
    sentence = _sentence(ewt[0], "answers-20111108072305AAPJTjj_ans-0005")
    encoded = encode_words([sentence], hub.bpe.sp, hub.task.source_dictionary, 64)
    first = [hub.task.source_dictionary[encoded.tokens[0][p]] for p in encoded.positions[0][:3]]
    assert [f.replace("\u2581", "")[:1] for f in first] == ["I", "'", "m"]  # It 's more


@pytest.mark.slow
def test_word_states_take_the_embedding_output_and_every_layer(trained_and_initial, tiny_databin,
                                                               ewt):
    hub = _hub(trained_and_initial[1], tiny_databin)
    sentences = read_conllu(ewt[1])[:20]
    encoded = encode_words(sentences, hub.bpe.sp, hub.task.source_dictionary, 64)
    states = word_states(hub.model, encoded, batch_tokens=256)
    words = sum(sum(p >= 0 for p in positions) for positions in encoded.positions)
    assert len(states) == 3 and all(s.shape == (words, 128) for s in states)  # roberta_tiny
    # one sentence alone, unbatched: the same states at its words' first pieces
    tokens = encoded.tokens[0].unsqueeze(0)
    with torch.no_grad():
        inner = hub.model(tokens, features_only=True, return_all_hiddens=True)[1]["inner_states"]
    kept = [p for p in encoded.positions[0] if p >= 0]
    for layer in (0, 2):
        np.testing.assert_allclose(states[layer][: len(kept)], inner[layer][kept, 0].numpy(),
                                   rtol=1e-4, atol=1e-5)
    # in windows of 12 positions: each word's state is read in the window it takes
    encoded = encode_words(sentences, hub.bpe.sp, hub.task.source_dictionary, 12)
    states = word_states(hub.model, encoded, batch_tokens=256)
    s = next(s for s, n in enumerate(encoded.windows) if n > 2)  # a sentence of 3+ windows
    first = sum(p >= 0 for positions in encoded.positions[:s] for p in positions)
    with torch.no_grad():
        for w, (row, position) in enumerate(zip(encoded.rows[s], encoded.positions[s])):
            inner = hub.model(encoded.tokens[row].unsqueeze(0), features_only=True,
                              return_all_hiddens=True)[1]["inner_states"]
            np.testing.assert_allclose(states[2][first + w], inner[2][position, 0].numpy(),
                                       rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_the_probe_sees_pre_training_and_is_deterministic(trained_and_initial, tiny_databin,
                                                          small_ewt):
    initial = pos_probe(_hub(trained_and_initial[0], tiny_databin), small_ewt)
    trained = pos_probe(_hub(trained_and_initial[1], tiny_databin), small_ewt)
    assert trained["pos_accuracy_ambiguous"] > initial["pos_accuracy_ambiguous"]
    assert trained["pos_accuracy"] > initial["pos_accuracy"]
    assert trained == pos_probe(_hub(trained_and_initial[1], tiny_databin), small_ewt)
    for row in (initial, trained):
        assert set(row) == ({f"pos_accuracy{a}{s}" for a in ("", "_ambiguous")
                             for s in ("", "_layer0", "_layer1", "_layer2", "_baseline")})
        assert row["pos_accuracy"] == row["pos_accuracy_layer2"]
        assert all(0 <= v <= 100 for v in row.values())
    assert initial["pos_accuracy_baseline"] == trained["pos_accuracy_baseline"]


def test_the_most_frequent_tag_baseline_and_the_ambiguous_forms(small_ewt):
    """The baseline by hand: each form's most frequent tag in train, else train's most
    frequent tag; a form is ambiguous when it carries two tags over train and test."""
    from collections import Counter

    counts = {}
    for s in small_ewt.train:
        for w in s.words:
            counts.setdefault(w.form, Counter())[w.upos] += 1
    top = Counter(w.upos for s in small_ewt.train for w in s.words).most_common(1)[0][0]
    test = [w for s in small_ewt.test for w in s.words]
    right = [(counts[w.form].most_common(1)[0][0] if w.form in counts else top) == w.upos
             for w in test]
    baseline = small_ewt.baseline()
    assert baseline["pos_accuracy_baseline"] == pytest.approx(100 * np.mean(right))
    tags = {}
    for w in [w for s in small_ewt.train + small_ewt.test for w in s.words]:
        tags.setdefault(w.form, set()).add(w.upos)
    assert small_ewt.ambiguous == {f for f, t in tags.items() if len(t) > 1}
    # that: SCONJ, PRON or DET; and: CCONJ only
    assert "that" in small_ewt.ambiguous and "and" not in small_ewt.ambiguous


@pytest.mark.slow
def test_the_masked_lm_loss_is_fairseqs_criterion_on_the_same_masks(trained_and_initial,
                                                                   tiny_databin, alice):
    from fairseq.criterions.masked_lm import MaskedLmConfig, MaskedLmLoss
    from fairseq.data import data_utils

    from taco_fairseq.analysis.masked_lm_loss import mask_text, masked_lm_loss

    hub = _hub(trained_and_initial[1], tiny_databin)
    text = mask_text(hub, alice)
    again = mask_text(hub, alice)  # fixed seed: the same masks
    assert all(torch.equal(a, b) for a, b in zip(text.inputs + text.targets,
                                                 again.inputs + again.targets))
    pad = hub.task.source_dictionary.pad()
    assert all(len(t) <= 64 for t in text.inputs)
    assert text.inputs[0][0] == hub.task.source_dictionary.bos()
    loss = masked_lm_loss(hub.model, text, pad, batch_size=8)
    # fairseq's masked_lm criterion on the first 8 blocks = this on those blocks
    first = type(text)(text.inputs[:8], text.targets[:8], 0)
    sample = {"net_input": {"src_tokens": data_utils.collate_tokens(first.inputs, pad)},
              "target": data_utils.collate_tokens(first.targets, pad), "ntokens": 0,
              "nsentences": len(first.inputs)}
    criterion = MaskedLmLoss(MaskedLmConfig(), hub.task)
    hub.model.eval()
    with torch.no_grad():
        value, size, _ = criterion(hub.model, sample)
    assert masked_lm_loss(hub.model, first, pad) == pytest.approx(
        float(value) / float(size) / math.log(2), rel=1e-5)
    # the initialization predicts nearly uniformly over the 2,000-piece vocabulary
    initial = masked_lm_loss(_hub(trained_and_initial[0], tiny_databin).model,
                             mask_text(_hub(trained_and_initial[0], tiny_databin), alice), pad)
    assert loss < initial and initial == pytest.approx(math.log2(len(hub.task.source_dictionary)),
                                                       abs=0.5)


@pytest.mark.slow
def test_the_probes_command_writes_the_part_of_speech_columns(trained_and_initial, tiny_databin,
                                                              glue_databin, small_ewt,
                                                              tmp_path):
    import csv

    from taco_fairseq.cli.probes import main

    directory = tmp_path / "ewt"
    directory.mkdir()
    paths = []
    for name, sentences in (("dev", small_ewt.train), ("test", small_ewt.test)):
        source = EWT / f"en_ewt-ud-{name}.conllu"
        blocks = source.read_text(encoding="utf-8").split("\n\n")[:len(sentences)]
        paths.append(directory / source.name)
        paths[-1].write_text("\n\n".join(blocks) + "\n\n", encoding="utf-8")
    output = tmp_path / "probes.csv"
    main([str(trained_and_initial[1]), "--data-bin", str(tiny_databin), "--glue-data",
          str(glue_databin), "--tasks", "RTE", "--probe-max-train", "200", "--conllu-train",
          str(paths[0]), "--conllu-test", str(paths[1]), "--output", str(output)])
    row = next(csv.DictReader(open(output, newline="")))
    assert float(row["pos_accuracy"]) == pytest.approx(
        pos_probe(_hub(trained_and_initial[1], tiny_databin), small_ewt)["pos_accuracy"])
    with pytest.raises(SystemExit):  # one treebank without the other: a usage error
        main([str(trained_and_initial[1]), "--glue-data", str(glue_databin), "--conllu-train",
              str(paths[0]), "--output", str(output)])


# --- windows: sentences longer than the window (module doc) -------------------------------------
def test_windows_cover_every_piece_and_each_piece_takes_its_most_central_window():
    """By hand: 10 pieces in windows of 4 start every 2 pieces, the last at 6 (aligned to the
    end); 7 in windows of 5 (stride 2: 0, then 2 at the end), where piece 3 has one piece of
    context on its less-served side in both and takes the earlier. Then every length and size:
    the windows cover every piece, no window is longer than ``size``, and each piece takes the
    window with the most context on its less-served side, the earlier of equals."""
    assert window_spans(10, 4) == ([(0, 4), (2, 6), (4, 8), (6, 10)],
                                   [0, 0, 0, 1, 1, 2, 2, 3, 3, 3])
    assert window_spans(7, 5) == ([(0, 5), (2, 7)], [0, 0, 0, 0, 1, 1, 1])
    assert window_spans(4, 4) == ([(0, 4)], [0] * 4) and window_spans(0, 4) == ([(0, 0)], [])
    for size in range(1, 13):
        for n in range(0, 60):
            spans, choice = window_spans(n, size)
            assert len(choice) == n
            assert all(b - a == min(n, size) for a, b in spans)  # full windows
            assert spans[0][0] == 0 and spans[-1][1] == n
            starts = [a for a, _ in spans]
            assert starts == sorted(set(starts))
            assert all(b - a <= max(1, size // 2) for a, b in zip(starts, starts[1:]))
            for i, w in enumerate(choice):
                holding = [(min(i - a, b - 1 - i), -k) for k, (a, b) in enumerate(spans)
                           if a <= i < b]
                assert holding and spans[w][0] <= i < spans[w][1]
                assert max(holding) == (min(i - spans[w][0], spans[w][1] - 1 - i), -w)
    with pytest.raises(ValueError, match="size >= 1"):
        window_spans(5, 0)


@pytest.fixture(scope="session")
def pieces_of_ewt(ewt, tmp_path_factory):
    """A SentencePiece BPE model of 400 pieces trained on EWT dev's text (a second; small, so that
    sentences are long in pieces) and a dictionary of its pieces (as fairseq's: ``bos``,
    ``eos``, ``index``; fairseq itself is slow to import): (processor, dictionary, the first
    300 dev sentences)."""
    import sentencepiece as spm

    sentences = read_conllu(ewt[0])
    directory = tmp_path_factory.mktemp("spm")
    text = directory / "dev.txt"
    text.write_text("\n".join(s.text for s in sentences) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(input=str(text), model_prefix=str(directory / "sp"),
                                   vocab_size=400, model_type="bpe", num_threads=1,
                                   minloglevel=2)
    processor = spm.SentencePieceProcessor(model_file=str(directory / "sp.model"))
    return processor, _Dictionary(processor), sentences[:300]


class _Dictionary:
    """A fairseq dictionary's ``bos``, ``eos`` and ``index`` of a SentencePiece model's pieces
    (fairseq's order: ``<s>`` 0, ``<pad>`` 1, ``</s>`` 2, ``<unk>`` 3, then the pieces)."""

    def __init__(self, processor):
        self.ids = {processor.id_to_piece(i): 4 + i for i in range(processor.get_piece_size())}

    def bos(self):
        return 0

    def eos(self):
        return 2

    def index(self, piece):
        return self.ids.get(piece, 3)


def _cut_encoding(sentence, processor, dictionary, max_positions):
    """A sentence as encode_words encoded it before the windows: cut to ``max_positions``;
    (tokens, each word's first-piece position, −1 beyond the cut)."""
    pieces = processor.encode(sentence.text, out_type="proto").pieces[: max_positions - 2]
    ids = [dictionary.bos(), *(dictionary.index(p.piece) for p in pieces), dictionary.eos()]
    first = []
    for word in sentence.words:
        hit = next((i for i, p in enumerate(pieces) if p.begin < word.end
                    and p.end > word.start and p.surface.strip()), None)
        first.append(-1 if hit is None else hit + 1)
    return torch.tensor(ids, dtype=torch.long), first


def test_a_sentence_that_fits_is_encoded_as_before(pieces_of_ewt):
    """At 64 positions most sentences fit: one sequence each, the same tokens and positions
    as the cut encoding gave; a longer one's first window is the cut's sequence."""
    processor, dictionary, sentences = pieces_of_ewt
    encoded = encode_words(sentences, processor, dictionary, 64)
    fits = windowed = cut = 0
    row = 0
    for sentence, rows, positions, windows in zip(sentences, encoded.rows, encoded.positions,
                                                  encoded.windows):
        tokens, first = _cut_encoding(sentence, processor, dictionary, 64)
        assert torch.equal(encoded.tokens[row], tokens)
        if windows == 1:
            fits += 1
            assert positions == first and rows == [row] * len(first)
        else:
            windowed += 1
            cut += first.count(-1)  # words the cut left out
        row += windows
    assert fits > 200 and windowed > 5 and cut > 0 and row == len(encoded.tokens)


@pytest.mark.parametrize("window", [3, 12, 32])
def test_in_small_windows_every_word_is_kept_and_no_position_beyond_the_window_is_read(
        pieces_of_ewt, window):
    """Every sequence has at most ``window`` tokens (``<s>`` … ``</s>``); every word is kept,
    at its first piece, in a window of its own sentence, never on ``<s>`` or ``</s>``."""
    processor, dictionary, sentences = pieces_of_ewt
    encoded = encode_words(sentences, processor, dictionary, window)
    assert all(len(t) <= window for t in encoded.tokens)
    assert all(t[0] == dictionary.bos() and t[-1] == dictionary.eos() for t in encoded.tokens)
    assert sum(encoded.windows) == len(encoded.tokens) > len(sentences)
    row = 0
    for sentence, rows, positions, windows in zip(sentences, encoded.rows, encoded.positions,
                                                  encoded.windows):
        proto = processor.encode(sentence.text, out_type="proto").pieces
        assert windows == len(window_spans(len(proto), window - 2)[0])
        for word, word_row, position in zip(sentence.words, rows, positions):
            first = next(i for i, p in enumerate(proto) if p.begin < word.end
                         and p.end > word.start and p.surface.strip())
            assert row <= word_row < row + windows
            assert 0 < position < len(encoded.tokens[word_row]) - 1
            assert encoded.tokens[word_row][position] == dictionary.index(proto[first].piece)
        row += windows
    with pytest.raises(ValueError, match="max_positions 2: .* at least 3 positions"):
        encode_words(sentences, processor, dictionary, 2)


@pytest.mark.slow
def test_the_probe_in_a_window_shorter_than_the_models_positions(
        trained_and_initial, tiny_databin, small_ewt, monkeypatch):
    """The tiny model has 64 positions; in windows of 16 the probe encodes no sequence longer
    than 16 (many sentences in several windows), runs, and gives the same measures; a window
    below 3 or beyond the model's positions is refused, naming --pos-window."""
    from taco_fairseq.analysis import pos_probe as module

    hub = _hub(trained_and_initial[1], tiny_databin)
    assert hub.model.max_positions() == 64
    whole = pos_probe(hub, small_ewt)
    encoded = []
    encode = module.encode_words
    monkeypatch.setattr(module, "encode_words",
                        lambda *a: encoded.append(encode(*a)) or encoded[-1])
    assert whole == pos_probe(hub, small_ewt, window=64)
    assert max(len(t) for e in encoded for t in e.tokens) == 64
    encoded.clear()
    short = pos_probe(hub, small_ewt, window=16)
    assert len(encoded) == 2 and max(len(t) for e in encoded for t in e.tokens) == 16
    assert sum(n > 1 for e in encoded for n in e.windows) > 100
    assert set(short) == set(whole) and all(0 <= v <= 100 for v in short.values())
    assert short["pos_accuracy_baseline"] == whole["pos_accuracy_baseline"]
    with pytest.raises(ValueError, match="--pos-window 2: .* at least 3 positions"):
        pos_probe(hub, small_ewt, window=2)
    with pytest.raises(ValueError, match="--pos-window 65: the model has 64 positions"):
        pos_probe(hub, small_ewt, window=65)


def _compare_argv(tmp_path, *extra):
    return ["--data", str(tmp_path / "bin"), "--glue-data", str(tmp_path / "glue"), "--out",
            str(tmp_path / "out"), "--arch", "roberta_tiny", "--max-update", "20",
            "--checkpoint-updates", "20", "--tokens-per-sample", "32", "--primary-endpoint",
            "probe-average", "--probe-tasks", "RTE", *extra]


def test_the_commands_take_pos_window_to_the_probe(tmp_path, capsys, monkeypatch):
    """taco-compare's --pos-window is a study option, checked before anything runs (at least
    3, at most --tokens-per-sample, with the treebanks), and phase 2 gives it to the probe;
    taco-analyze-probes checks it before loading anything."""
    from types import SimpleNamespace

    from taco_fairseq.analysis import checkpoints, pos_probe as module
    from taco_fairseq.cli import compare, probes
    from taco_fairseq.comparison import study

    conllu = ["--conllu-train", str(tmp_path / "a.conllu"), "--conllu-test",
              str(tmp_path / "b.conllu")]
    parser = compare.build_parser()
    options = compare.study_options(
        parser.parse_args(_compare_argv(tmp_path, *conllu, "--pos-window", "16")), [])
    assert options.pos_window == 16
    assert compare.study_options(parser.parse_args(_compare_argv(tmp_path, *conllu)),
                                 []).pos_window is None
    for extra, message in ((["--pos-window", "16"], "--pos-window without --conllu-train"),
                           ([*conllu, "--pos-window", "2"], "--pos-window 2: "),
                           ([*conllu, "--pos-window", "33"],
                            "--pos-window 33: above --tokens-per-sample 32")):
        with pytest.raises(SystemExit):
            compare.parse_options(_compare_argv(tmp_path, *extra))
        assert message in capsys.readouterr().err.strip().splitlines()[-1]
    # phase 2: the probe gets the window
    calls = []
    monkeypatch.setattr(checkpoints, "load_checkpoint",
                        lambda *a: SimpleNamespace(hub=SimpleNamespace(
                            model=None, task=SimpleNamespace(source_dictionary=None))))
    monkeypatch.setattr(module, "pos_probe",
                        lambda hub, data, window=None: calls.append(window) or {})
    inputs = study.MeasureInputs(options)
    inputs.treebank = "treebank"
    study._measure(dataclasses.replace(options, cpu=True), SimpleNamespace(path=None), ["pos"],
                   inputs)
    assert calls == [16]
    with pytest.raises(SystemExit):
        probes.main(["run", "--glue-data", str(tmp_path), *conllu, "--pos-window", "2",
                     "--output", str(tmp_path / "p.csv")])
    assert "--pos-window 2: " in capsys.readouterr().err
