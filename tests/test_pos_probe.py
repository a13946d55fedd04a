"""The part-of-speech probe (analysis/pos_probe.py) and its CoNLL-U reader (analysis/conllu.py)
on the UD English EWT treebank in ../shared, and the masked-LM loss on held-out text
(analysis/masked_lm_loss.py)."""

import math

import numpy as np
import pytest
import torch

from taco_fairseq.analysis.conllu import CoNLLUError, read_conllu
from taco_fairseq.analysis.pos_probe import PosProbeData, encode_words, pos_probe, word_states

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
    for sentence, tokens, positions in zip(sentences, encoded.tokens, encoded.positions):
        if len(pieces(sentence.text)) <= 62:  # not cut: exactly what hub.encode gives
            assert torch.equal(tokens, hub.encode(sentence.text))
        proto = pieces(sentence.text, out_type="proto").pieces
        for word, position in zip(sentence.words, positions):
            if position < 0:  # beyond the cut at 64 positions
                assert len(proto) > 62
                continue
            piece = proto[position - 1]  # after <s>
            assert piece.begin < word.end and piece.end > word.start  # overlaps the word
            earlier = proto[: position - 1]
            assert not any(p.begin < word.end and p.end > word.start and p.surface.strip()
                           for p in earlier)  # and is the first that does
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
