"""SentencePiece training and the fairseq dict.txt (ids, order, counts, checks)."""

import io

import numpy as np
import pytest
import sentencepiece as spm
from fairseq.data import Dictionary

from taco_fairseq.prep.documents import write_documents
from taco_fairseq.prep.vocabulary import (
    SPECIAL_PIECES,
    DictionaryEncoder,
    train_sentencepiece,
    write_fairseq_dict,
)


@pytest.fixture(scope="module")
def text(tmp_path_factory, wikipedia_aa, wikitext_test):
    """Document text: 6 Wikipedia articles and 300 WikiText lines (about 1000 lines)."""
    path = tmp_path_factory.mktemp("spm") / "train.txt"
    write_documents([wikipedia_aa, wikitext_test], path, max_docs=6, max_lines=700)
    return path


@pytest.fixture(scope="module")
def model_path(text):
    path = text.with_name("sentencepiece.bpe.model")
    train_sentencepiece(text, path, vocab_size=1000, num_threads=2)
    return path


@pytest.fixture(scope="module")
def model(model_path):
    return spm.SentencePieceProcessor(model_file=str(model_path))


@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
def test_special_pieces_have_fairseq_ids(text, tmp_path, model_type):
    model = train_sentencepiece(
        text, tmp_path / "m.model", vocab_size=800, model_type=model_type, num_threads=2
    )
    assert [model.id_to_piece(i) for i in range(4)] == list(SPECIAL_PIECES)
    assert (model.bos_id(), model.pad_id(), model.eos_id(), model.unk_id()) == (0, 1, 2, 3)
    assert model.get_piece_size() == 800
    assert spm.SentencePieceProcessor(model_file=str(tmp_path / "m.model")).get_piece_size() == 800


def test_sampled_training_is_deterministic(text, tmp_path):
    def train(name, seed):
        train_sentencepiece(
            text, tmp_path / name, vocab_size=500, max_sentences=300, seed=seed, num_threads=2
        )
        return (tmp_path / name).read_bytes()

    first = train("a.model", seed=1)
    assert train("b.model", seed=1) == first
    assert train("c.model", seed=2) != first  # another sample of 300 of ~1000 lines


def test_vocab_size_too_large_names_the_option(tmp_path, wikitext_test):
    small = tmp_path / "small.txt"
    write_documents([wikitext_test], small, max_lines=20)
    message = r"--vocab-size 8000 is too large.*--vocab-size \d+ or less"
    with pytest.raises(ValueError, match=message):
        train_sentencepiece(small, tmp_path / "m.model", vocab_size=8000)
    assert not (tmp_path / "m.model").exists()


def test_vocab_size_too_small_names_the_option(text, tmp_path):
    with pytest.raises(ValueError, match=r"--vocab-size 40 is too small.*--vocab-size \d+ or more"):
        train_sentencepiece(text, tmp_path / "m.model", vocab_size=40)


def test_fairseq_dict_order_and_counts(text, model, tmp_path):
    lines = text.read_text(encoding="utf-8").split("\n")[:-1]
    ids = np.concatenate([np.array(i, dtype=np.int64) for i in model.encode(lines)])
    counts = np.bincount(ids, minlength=model.get_piece_size())
    path = tmp_path / "dict.txt"

    assert write_fairseq_dict(model, counts, path) == model.get_piece_size() - 4

    entries = [line.rsplit(" ", 1) for line in path.read_text(encoding="utf-8").splitlines()]
    assert not set(SPECIAL_PIECES) & {piece for piece, _ in entries}
    assert [int(n) for _, n in entries] == counts[4:].tolist()
    assert sum(int(n) for _, n in entries) > 0.99 * len(ids)  # all but unknowns
    dictionary = Dictionary.load(str(path))
    assert len(dictionary) == model.get_piece_size()
    for sp_id in range(model.get_piece_size()):  # fairseq id == SentencePiece id
        assert dictionary.index(model.id_to_piece(sp_id)) == sp_id
    encoder = DictionaryEncoder(model, dictionary, "dict.txt and its model")
    assert encoder.identity and encoder.missing_pieces == encoder.extra_symbols == 0
    assert dictionary.add_symbol("<mask>") == model.get_piece_size()


def _model(text, **options):
    model_file = io.BytesIO()
    spm.SentencePieceTrainer.train(
        input=str(text), model_writer=model_file, vocab_size=600, minloglevel=2, **options
    )
    return spm.SentencePieceProcessor(model_proto=model_file.getvalue())


def test_fairseq_dict_refuses_a_mask_piece(text, tmp_path):
    model = _model(
        text, bos_id=0, pad_id=1, eos_id=2, unk_id=3, user_defined_symbols=["<mask>"]
    )
    with pytest.raises(ValueError, match=r"piece 4 '<mask>' cannot be a fairseq"):
        write_fairseq_dict(model, np.zeros(600, dtype=int), tmp_path / "dict.txt")


def test_fairseq_dict_refuses_other_special_ids(text, tmp_path):
    model = _model(text)  # SentencePiece's defaults: <unk>=0 <s>=1 </s>=2, no <pad>
    with pytest.raises(ValueError, match=r"first pieces are \['<unk>', '<s>', '</s>', "):
        write_fairseq_dict(model, np.zeros(600, dtype=int), tmp_path / "dict.txt")


def test_a_dict_in_another_order_maps_pieces_through_it(model, text, tmp_path):
    """The fast route (ids as they are) only for dict.txt in SentencePiece order; any other
    dict.txt maps each piece to its line there, a piece it lacks to <unk>."""
    path = tmp_path / "dict.txt"
    write_fairseq_dict(model, np.zeros(model.get_piece_size(), dtype=int), path)
    lines = text.read_text(encoding="utf-8").splitlines()[:200]
    sp_ids = model.encode(lines)
    encoded = DictionaryEncoder(model, Dictionary.load(str(path)), "d and m").encode(lines)
    assert [e.tolist() for e in encoded] == sp_ids

    entries = path.read_text(encoding="utf-8").splitlines()
    entries[5], entries[6] = entries[6], entries[5]  # ids 9 and 10 swapped
    path.write_text("\n".join(entries[:-1]) + "\n", encoding="utf-8")  # the last piece left out
    encoder = DictionaryEncoder(model, Dictionary.load(str(path)), "d and m")
    assert not encoder.identity
    assert encoder.missing_pieces == 1 and encoder.extra_symbols == 0
    last = model.get_piece_size() - 1
    mapping = {9: 10, 10: 9, last: encoder.dictionary.unk()}
    expected = [[mapping.get(i, i) for i in ids] for ids in sp_ids]
    assert {9, 10} <= set(sum(sp_ids, []))
    assert [e.tolist() for e in encoder.encode(lines, num_threads=2)] == expected
