"""Joint tokenizer training and loading (uat_hf.data.tokenization), on the bundled text."""

from __future__ import annotations

import gzip
import itertools
import json
import unicodedata

import datasets
import pytest
from transformers import AutoTokenizer, MarianTokenizer

from conftest import save_marian_tokenizer
from uat_hf.data.corpora import BUNDLED_DIR
from uat_hf.data.tokenization import check_tags_in_vocab, load_tokenizer, train_joint_tokenizer

TAGS = [">>de<<", ">>fr<<"]
SENTENCES = [
    "Hello world.",
    "Die Vordergrundfarbe auf Schwarz und die Hintergrundfarbe auf Weiß setzen",
    "Ce paquet contient les fichiers nécessaires à l'exécution du programme.",
    "-a, --all do not ignore entries starting with . (default)",
    "Inkscape (Standard)",
]


def bundled_pairs(path, n: int) -> list[dict[str, str]]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line)["translation"] for line in itertools.islice(f, n)]


@pytest.fixture(scope="module")
def texts() -> list[str]:
    rows = bundled_pairs(BUNDLED_DIR / "multidomain-en-de" / "software.train.jsonl.gz", 500)
    rows += bundled_pairs(BUNDLED_DIR / "multilingual-ddtp" / "fr.train.jsonl.gz", 500)
    return [text for row in rows for text in row.values()] + SENTENCES


@pytest.fixture(scope="module")
def bpe(texts):
    return train_joint_tokenizer(texts, vocab_size=2000, special_tokens=TAGS)


def encodings(tok, sentences):
    return [tok(s)["input_ids"] for s in sentences]


def test_special_token_ids_and_eos_appended(bpe):
    assert (bpe.pad_token_id, bpe.eos_token_id, bpe.unk_token_id) == (0, 1, 2)
    assert bpe.convert_ids_to_tokens([0, 1, 2]) == ["<pad>", "</s>", "<unk>"]
    assert len(bpe) == 2000
    for ids in encodings(bpe, SENTENCES):
        assert ids[-1] == bpe.eos_token_id and ids.count(bpe.eos_token_id) == 1
    assert bpe(text_target="Hallo Welt")["input_ids"][-1] == bpe.eos_token_id


def test_decode_restores_detokenized_text(bpe, texts):
    ordinary = [t for t in texts[:300] + SENTENCES
                if unicodedata.normalize("NFKC", t) == t and " ".join(t.split()) == t]
    assert len(ordinary) > 250
    for text in ordinary:
        assert bpe.decode(bpe(text)["input_ids"], skip_special_tokens=True) == text


def test_save_pretrained_round_trip_gives_identical_ids(bpe, texts, tmp_path):
    bpe.save_pretrained(tmp_path)
    for reloaded in (AutoTokenizer.from_pretrained(tmp_path), load_tokenizer(str(tmp_path))):
        assert len(reloaded) == len(bpe)
        assert encodings(reloaded, texts[:200] + SENTENCES) == encodings(bpe, texts[:200] + SENTENCES)
        assert (reloaded.pad_token_id, reloaded.eos_token_id, reloaded.unk_token_id) == (0, 1, 2)
        check_tags_in_vocab(reloaded, TAGS)
        assert reloaded.decode(reloaded(SENTENCES[1])["input_ids"], skip_special_tokens=True) == SENTENCES[1]


def test_tags_are_single_special_tokens(bpe):
    check_tags_in_vocab(bpe, TAGS)
    de = bpe.convert_tokens_to_ids(">>de<<")
    ids = bpe(">>de<< Hello world.")["input_ids"]
    assert ids[0] == de and ids[1:] == bpe("Hello world.")["input_ids"]
    assert bpe.decode(ids, skip_special_tokens=True) == "Hello world."
    with pytest.raises(ValueError, match=r"'>>cs<<' is not a single token"):
        check_tags_in_vocab(bpe, [">>cs<<"])


def test_unigram_model_and_lowercase(texts, tmp_path):
    tok = train_joint_tokenizer(texts, vocab_size=1500, model="unigram", special_tokens=TAGS, lowercase=True)
    check_tags_in_vocab(tok, TAGS)
    assert tok.decode(tok("Hello World.")["input_ids"], skip_special_tokens=True) == "hello world."
    tok.save_pretrained(tmp_path)
    assert encodings(load_tokenizer(str(tmp_path)), SENTENCES) == encodings(tok, SENTENCES)


def test_trains_from_source_target_datasets(texts):
    data = datasets.Dataset.from_dict({"source": texts[0:200:2], "target": texts[1:200:2]})
    tok = train_joint_tokenizer({"software": data}, vocab_size=400)
    assert tok.decode(tok(texts[1])["input_ids"], skip_special_tokens=True) == texts[1]
    with pytest.raises(ValueError, match=r"columns \['text'\].*load_corpus_split"):
        train_joint_tokenizer(datasets.Dataset.from_dict({"text": ["a"]}), vocab_size=400)


def test_invalid_arguments():
    with pytest.raises(ValueError, match="choose 'bpe' or 'unigram'"):
        train_joint_tokenizer(["a b"], model="wordpiece")
    with pytest.raises(ValueError, match="no room"):
        train_joint_tokenizer(["a b"], vocab_size=3)
    with pytest.raises(ValueError, match="whitespace"):
        train_joint_tokenizer(["a b"], special_tokens=[">> de<<"])
    with pytest.raises(TypeError, match="single string"):
        train_joint_tokenizer("a b")
    with pytest.raises(ValueError, match="never runs remote code"):
        load_tokenizer("some/repo", trust_remote_code=True)


@pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")
def test_load_tokenizer_reads_a_local_marian_directory(texts, tmp_path):
    """The opus-mt path: a MarianTokenizer (sentencepiece models + vocab.json) saved to a directory."""
    marian = save_marian_tokenizer(texts, tmp_path / "marian", vocab_size=300)
    loaded = load_tokenizer(str(tmp_path / "marian"))
    assert isinstance(loaded, MarianTokenizer)
    assert encodings(loaded, SENTENCES) == encodings(marian, SENTENCES)


def test_load_tokenizer_hub_id_while_offline_says_what_to_do(tmp_path):
    from huggingface_hub import constants

    assert constants.HF_HUB_OFFLINE, "the tests run with HF_HUB_OFFLINE=1 (conftest)"
    with pytest.raises(ConnectionError) as error:
        load_tokenizer("Helsinki-NLP/opus-mt-en-de", cache_dir=str(tmp_path))  # an empty cache
    assert isinstance(error.value, ValueError)  # uat-train reports it as bad input
    message = str(error.value)
    assert message.startswith(
        "could not load tokenizer 'Helsinki-NLP/opus-mt-en-de' from the Hugging Face Hub: offline mode is on "
        "(HF_HUB_OFFLINE) and it is not in the local cache"
    )
    assert "give a local path" in message
    # Other failures are not dressed up as Hub trouble: a local directory without a tokenizer.
    (tmp_path / "empty").mkdir()
    with pytest.raises(Exception) as other:
        load_tokenizer(str(tmp_path / "empty"))
    assert "Hugging Face Hub" not in str(other.value)
