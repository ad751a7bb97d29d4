"""Corpus loading, cleaning, tagging and tokenization (uat_hf.data.corpora) on real files and datasets."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import datasets
import pytest

from uat_hf.data.corpora import (
    BUNDLED_DIR,
    CorpusSpec,
    PreprocessingConfig,
    add_language_tags,
    check_tags_in_vocab,
    corpus_specs_from_directory,
    corpus_tags,
    language_tag,
    load_corpora,
    load_corpus_split,
    preprocess,
    tokenize_corpus,
)
from uat_hf.data.tokenization import train_joint_tokenizer

MULTIDOMAIN = BUNDLED_DIR / "multidomain-en-de"
MULTILINGUAL = BUNDLED_DIR / "multilingual-ddtp"
LANGS = ["cs", "de", "fr", "ko"]


def pairs(rows: list[tuple[str, str]]) -> datasets.Dataset:
    return datasets.Dataset.from_dict({"source": [s for s, _ in rows], "target": [t for _, t in rows]})


def as_rows(dataset: datasets.Dataset) -> list[tuple[str, str]]:
    return list(zip(dataset["source"], dataset["target"]))


def write_jsonl(path: Path, records: list[dict]) -> Path:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    return path


def translations(n: int, src: str = "en", tgt: str = "de") -> list[dict]:
    return [{"translation": {src: f"sentence number {i}", tgt: f"Satz Nummer {i}"}} for i in range(n)]


@pytest.fixture(scope="module")
def tagged_tokenizer():
    """A small joint tokenizer over the multilingual sample with every target-language tag."""
    specs = corpus_specs_from_directory(MULTILINGUAL, source_lang="en", direction="one-to-many", max_examples=300)
    texts = [load_corpus_split(spec, "train") for spec in specs]
    return train_joint_tokenizer(texts, vocab_size=1500, special_tokens=[language_tag(lang) for lang in LANGS])


# --- specs from a directory -----------------------------------------------------------------------------


def test_multidomain_directory_gives_one_spec_per_domain():
    specs = corpus_specs_from_directory(MULTIDOMAIN, "en", "de")
    assert [s.name for s in specs] == ["bible", "descriptions", "dictionary", "software"]
    for spec in specs:
        assert (spec.source_lang, spec.target_lang) == ("en", "de")
        for split in ("train", "dev", "test"):
            assert Path(spec.split_location(split)) == MULTIDOMAIN / f"{spec.name}.{split}.jsonl.gz"


def test_directory_corpora_selection_keeps_order_and_rejects_unknown():
    specs = corpus_specs_from_directory(MULTIDOMAIN, "en", "de", corpora=["software", "bible"], max_examples=7)
    assert [s.name for s in specs] == ["software", "bible"]
    assert all(s.max_examples == 7 for s in specs)
    with pytest.raises(ValueError, match=r"'news'.*available: \['bible', 'descriptions'"):
        corpus_specs_from_directory(MULTIDOMAIN, "en", "de", corpora=["news"])


def test_multilingual_directions():
    m2o = corpus_specs_from_directory(MULTILINGUAL, target_lang="en", direction="many-to-one")
    assert [(s.name, s.source_lang, s.target_lang) for s in m2o] == [(lang, lang, "en") for lang in LANGS]
    o2m = corpus_specs_from_directory(MULTILINGUAL, direction="en2x")
    assert [(s.name, s.source_lang, s.target_lang) for s in o2m] == [(lang, "en", lang) for lang in LANGS]
    with pytest.raises(ValueError, match="give only target_lang"):
        corpus_specs_from_directory(MULTILINGUAL, "fr", "en", direction="x2en")
    with pytest.raises(ValueError, match="needs both source_lang and target_lang"):
        corpus_specs_from_directory(MULTIDOMAIN, "en")
    with pytest.raises(ValueError, match="Unknown direction"):
        corpus_specs_from_directory(MULTILINGUAL, direction="sideways")


def test_missing_split_file_leaves_split_absent(tmp_path):
    write_jsonl(tmp_path / "news.train.jsonl.gz", translations(3))
    (spec,) = corpus_specs_from_directory(tmp_path, "en", "de")
    assert spec.dev is None and spec.test is None
    with pytest.raises(ValueError, match=r"'news' has no 'dev' split"):
        load_corpus_split(spec, "dev")


# --- loading ----------------------------------------------------------------------------------------------


def test_bundled_gzip_jsonl_loads_source_and_target_in_file_order():
    spec = corpus_specs_from_directory(MULTILINGUAL, source_lang="en", direction="one-to-many", corpora=["ko"],
                                       max_examples=20)[0]
    train = load_corpus_split(spec, "train")
    assert train.column_names == ["source", "target"] and len(train) == 20
    with gzip.open(MULTILINGUAL / "ko.train.jsonl.gz", "rt", encoding="utf-8") as f:
        first = json.loads(f.readline())["translation"]
    assert train[0] == {"source": first["en"], "target": first["ko"]}
    assert len(load_corpus_split(spec, "dev")) == 100  # max_examples applies to train only


def test_plain_jsonl_with_two_fields(tmp_path):
    file = write_jsonl(tmp_path / "c.jsonl",
                       [{"src": "a b", "tgt": "x y", "id": 1}, {"src": "c", "tgt": "z", "id": 2}])
    spec = CorpusSpec("c", "en", "de", train=str(file), source_field="src", target_field="tgt")
    assert as_rows(load_corpus_split(spec, "train")) == [("a b", "x y"), ("c", "z")]


def test_tsv_without_header_is_source_then_target(tmp_path):
    file = tmp_path / "c.tsv.gz"
    with gzip.open(file, "wt", encoding="utf-8") as f:
        f.write('He said "hi"\tEr sagte "hallo"\nNA\tnull\n')
    spec = CorpusSpec("c", "en", "de", train=str(file))
    assert as_rows(load_corpus_split(spec, "train")) == [('He said "hi"', 'Er sagte "hallo"'), ("NA", "null")]


def test_tsv_with_header_and_fields(tmp_path):
    file = tmp_path / "c.tsv"
    file.write_text("id\tde\ten\n1\tHallo Welt\tHello world\n", encoding="utf-8")
    spec = CorpusSpec("c", "en", "de", train=str(file), source_field="en", target_field="de")
    assert as_rows(load_corpus_split(spec, "train")) == [("Hello world", "Hallo Welt")]


def test_hub_layout_parquet_directory(tmp_path):
    (tmp_path / "data").mkdir()
    rows = translations(6)
    datasets.Dataset.from_list(rows).to_parquet(str(tmp_path / "data" / "train-00000-of-00001.parquet"))
    datasets.Dataset.from_list(rows[:2]).to_parquet(str(tmp_path / "data" / "validation-00000-of-00001.parquet"))
    spec = CorpusSpec("hub", "en", "de", path=str(tmp_path), max_examples=4)
    assert len(load_corpus_split(spec, "train")) == 4
    assert as_rows(load_corpus_split(spec, "dev")) == [
        ("sentence number 0", "Satz Nummer 0"), ("sentence number 1", "Satz Nummer 1")
    ]
    with pytest.raises(ValueError, match=r"'hub' split 'test'.*'test'"):
        load_corpus_split(spec, "test")


def test_hub_layout_with_readme_config_and_split_names(tmp_path):
    (tmp_path / "de-en").mkdir()
    for split in ("train", "dev"):
        records = [{"de": f"{split} Satz {i}", "en": f"{split} sentence {i}"} for i in range(3)]
        write_jsonl(tmp_path / "de-en" / f"{split}.jsonl", records)
    (tmp_path / "README.md").write_text(
        "---\nconfigs:\n- config_name: de-en\n  data_files:\n  - split: train\n    path: de-en/train.jsonl\n"
        "  - split: dev\n    path: de-en/dev.jsonl\n---\n# toy\n",
        encoding="utf-8",
    )
    spec = CorpusSpec("toy", "en", "de", path=str(tmp_path), hub_config="de-en", dev="dev", source_field="en",
                      target_field="de")
    assert load_corpus_split(spec, "dev")[2] == {"source": "dev sentence 2", "target": "dev Satz 2"}


# --- loading errors -------------------------------------------------------------------------------------


def test_missing_file_names_corpus_and_split(tmp_path):
    spec = CorpusSpec("medical", "en", "de", train=str(tmp_path / "nope.jsonl"))
    with pytest.raises(FileNotFoundError, match=r"'medical' split 'train'.*nope.jsonl"):
        load_corpus_split(spec, "train")


def test_missing_language_names_corpus_language_and_languages_present(tmp_path):
    file = write_jsonl(tmp_path / "c.jsonl.gz", translations(3, "en", "fr"))
    spec = CorpusSpec("legal", "en", "de", train=str(file))
    with pytest.raises(ValueError, match=r"'legal'.*no language 'de' \(languages present: \['en', 'fr'\]\)"):
        load_corpus_split(spec, "train")


def test_row_missing_target_names_row_and_fields_present(tmp_path):
    records = translations(3) + [{"translation": {"en": "lonely"}}]
    spec = CorpusSpec("legal", "en", "de", train=str(write_jsonl(tmp_path / "c.jsonl", records)))
    with pytest.raises(ValueError, match=r"'legal' split 'train' row 3: target text \(language 'de'"
                                         r".*present in this row: \['en'\]"):
        load_corpus_split(spec, "train")


def test_missing_field_lists_fields_present(tmp_path):
    file = write_jsonl(tmp_path / "c.jsonl", [{"src": "a", "tgt": "b"}])
    spec = CorpusSpec("web", "en", "de", train=str(file), source_field="src", target_field="target")
    with pytest.raises(ValueError, match=r"'web'.*target field 'target' not found; fields present: \['src', 'tgt'\]"):
        load_corpus_split(spec, "train")
    no_translation = CorpusSpec("web", "en", "de", train=str(file))
    with pytest.raises(ValueError, match=r"no 'translation' field.*source_field"):
        load_corpus_split(no_translation, "train")


def test_empty_split_is_an_error(tmp_path):
    file = tmp_path / "c.dev.jsonl.gz"
    with gzip.open(file, "wt"):
        pass
    with pytest.raises(ValueError, match=r"'c' split 'dev'.*empty"):
        load_corpus_split(CorpusSpec("c", "en", "de", dev=str(file)), "dev")


def write_bytes(path: Path, data: bytes) -> Path:
    """``data`` written as is, compressed by the suffix (.gz, .bz2, .xz)."""
    import bz2
    import lzma

    opener = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}.get(path.suffix, open)
    with opener(path, "wb") as f:
        f.write(data)
    return path


# Line 3 holds Latin-1 text (café), which is not UTF-8.
_JSON_LINES = [json.dumps({"translation": {"en": f"sentence {i}", "de": f"Satz {i}"}}).encode() for i in range(4)]
_LATIN1_JSON = '{"translation": {"en": "my café", "de": "mein Café"}}'.encode("latin-1")
_LATIN1_TSV = "my café\tmein Café".encode("latin-1")


@pytest.mark.parametrize(
    "name, content",
    [
        ("c.jsonl", b"\n".join(_JSON_LINES[:2] + [_LATIN1_JSON] + _JSON_LINES[2:]) + b"\n"),
        ("c.jsonl.gz", b"\n".join(_JSON_LINES[:2] + [_LATIN1_JSON] + _JSON_LINES[2:]) + b"\n"),
        ("c.jsonl.bz2", b"\n".join(_JSON_LINES[:2] + [_LATIN1_JSON] + _JSON_LINES[2:]) + b"\n"),
        ("c.jsonl.xz", b"\n".join(_JSON_LINES[:2] + [_LATIN1_JSON] + _JSON_LINES[2:]) + b"\n"),
        ("c.json", b"[\n" + b",\n".join(_JSON_LINES[:1] + [_LATIN1_JSON] + _JSON_LINES[1:]) + b"\n]\n"),
        ("c.tsv", b"a b\tx y\nc d\tz w\n" + _LATIN1_TSV + b"\ne f\tv u\n"),
        ("c.tsv.gz", b"a b\tx y\nc d\tz w\n" + _LATIN1_TSV + b"\ne f\tv u\n"),
        ("c.csv", b"a b,x y\nc d,z w\n" + _LATIN1_TSV.replace(b"\t", b",") + b"\ne f,v u\n"),
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_invalid_utf8_names_the_file_and_line(tmp_path, name, content):
    file = write_bytes(tmp_path / name, content)
    spec = CorpusSpec("legal", "en", "de", train=str(file))
    with pytest.raises(ValueError) as error:
        load_corpus_split(spec, "train", cache_dir=str(tmp_path / "cache"))
    message = str(error.value)
    assert message.startswith(f"Corpus 'legal' split 'train': {str(file)!r} is not valid UTF-8 text: line 3, column ")
    assert "has the byte 0xe9" in message and "Convert the file to UTF-8" in message


def test_invalid_utf8_in_a_hub_layout_directory_names_the_file(tmp_path):
    (tmp_path / "repo" / "data").mkdir(parents=True)
    write_jsonl(tmp_path / "repo" / "data" / "train.jsonl", translations(3))
    bad = write_bytes(tmp_path / "repo" / "data" / "validation.jsonl",
                      b"\n".join(_JSON_LINES[:1] + [_LATIN1_JSON]) + b"\n")
    spec = CorpusSpec("hub", "en", "de", path=str(tmp_path / "repo"))
    assert len(load_corpus_split(spec, "train", cache_dir=str(tmp_path / "cache"))) == 3
    with pytest.raises(ValueError, match=rf"'hub' split 'dev': {str(bad)!r} is not valid UTF-8 text: line 2, column "):
        load_corpus_split(spec, "dev", cache_dir=str(tmp_path / "cache"))


def test_two_files_for_one_corpus_split_are_refused(tmp_path):
    write_jsonl(tmp_path / "news.train.jsonl", translations(3))
    write_jsonl(tmp_path / "news.train.jsonl.gz", translations(4))
    with pytest.raises(ValueError, match=r"'news' split 'train'.*'news.train.jsonl', 'news.train.jsonl.gz'"):
        corpus_specs_from_directory(tmp_path, "en", "de")
    (tmp_path / "news.train.jsonl").unlink()
    (tmp_path / "news.dev.tsv").write_text("a\tb\n", encoding="utf-8")
    write_jsonl(tmp_path / "news.dev.jsonl", translations(2))
    with pytest.raises(ValueError, match=r"'news' split 'dev'.*'news.dev.jsonl', 'news.dev.tsv'.*keep one"):
        corpus_specs_from_directory(tmp_path, "en", "de")
    # A file no corpus format reads (a checksum, an editor backup) beside the corpus file is no rival.
    (tmp_path / "news.dev.tsv").unlink()
    (tmp_path / "news.train.jsonl.gz.md5").write_text("0123\n", encoding="utf-8")
    (spec,) = corpus_specs_from_directory(tmp_path, "en", "de")
    assert (Path(spec.train).name, Path(spec.dev).name) == ("news.train.jsonl.gz", "news.dev.jsonl")


def test_hub_id_while_offline_says_what_to_do(tmp_path):
    assert datasets.config.HF_HUB_OFFLINE, "the tests run with HF_HUB_OFFLINE=1 (conftest)"
    for spec in (
        CorpusSpec("news", "en", "de", path="uat-hf-tests/no-such-dataset", hub_config="de-en"),
        CorpusSpec("news", "en", "de", train="uat-hf-tests/no-such-dataset"),
    ):
        with pytest.raises(ConnectionError) as error:
            load_corpus_split(spec, "train", cache_dir=str(tmp_path))
        assert isinstance(error.value, ValueError)  # uat-train reports it as bad input
        message = str(error.value)
        assert message.startswith(
            "Corpus 'news' split 'train': could not load dataset 'uat-hf-tests/no-such-dataset' from the Hugging Face "
            "Hub: offline mode is on (HF_HUB_OFFLINE) and it is not in the local cache"
        )
        assert "is not a local directory either" in message and "give a local path" in message


# --- preprocessing --------------------------------------------------------------------------------------


def test_ratio_filter_keeps_exactly_the_pairs_within_ratio():
    rows = [
        ("a b c", "x y"),  # 1.5: kept (limit is inclusive)
        ("a b c d", "x y"),  # 2.0: dropped
        ("a b", "w x y z"),  # 2.0 the other way: dropped
        ("a", "x y"),  # 2.0: dropped
        ("a b", "x y z"),  # 1.5: kept
        ("a  b   c", "x y"),  # extra spaces do not count as words: kept
    ]
    kept = preprocess(pairs(rows), PreprocessingConfig(max_length_ratio=1.5), corpus="t")
    assert as_rows(kept) == [("a b c", "x y"), ("a b", "x y z"), ("a  b   c", "x y")]
    assert len(preprocess(pairs(rows), PreprocessingConfig(max_length_ratio=None), corpus="t")) == len(rows)


def test_a_filter_that_removes_much_of_a_corpus_warns_with_its_name(caplog):
    """Japanese has no spaces: the word-count ratio filter would silently drop most of it; it must say so."""
    rows = [
        ("私は毎朝コーヒーを飲みます。", "I drink coffee every morning."),
        ("このパッケージには開発用のファイルが含まれています。", "This package contains the development files."),
        ("図書館は駅の近くにあります。", "The library is near the station."),
        ("明日は雨が降るでしょう。", "It will probably rain tomorrow."),
        ("猫", "cat"),
    ]
    with caplog.at_level("WARNING", logger="uat_hf.data.corpora"):
        kept = preprocess(pairs(rows), PreprocessingConfig(max_length_ratio=1.5), corpus="ja")
    assert as_rows(kept) == [("猫", "cat")]
    warning = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warning) == 1 and "'ja'" in warning[0] and "removed 4 of 5" in warning[0]
    assert "max_length_ratio" in warning[0]
    caplog.clear()
    with caplog.at_level("WARNING", logger="uat_hf.data.corpora"):  # a few misaligned pairs among many: no warning
        preprocess(pairs([(f"a{i} b", f"x{i} y") for i in range(9)] + [("a b c d", "x")]),
                   PreprocessingConfig(max_length_ratio=1.5), corpus="de")
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


def test_dedupe_keeps_first_occurrence_of_identical_pairs():
    rows = [("a", "x"), ("b", "y"), ("a", "x"), ("a", "z"), (" b ", "y")]
    kept = preprocess(pairs(rows), PreprocessingConfig(max_length_ratio=None), corpus="t")
    assert as_rows(kept) == [("a", "x"), ("b", "y"), ("a", "z")]
    no_dedupe = PreprocessingConfig(max_length_ratio=None, dedupe=False)
    assert len(preprocess(pairs(rows), no_dedupe, corpus="t")) == len(rows)


def test_empty_sides_are_removed_and_text_is_stripped():
    rows = [("", "x"), ("   ", "y"), ("a", ""), ("  b ", " z\t")]
    assert as_rows(preprocess(pairs(rows), PreprocessingConfig(), corpus="t")) == [("b", "z")]
    keep_empty = PreprocessingConfig(max_length_ratio=None, drop_empty=False, dedupe=False)
    assert len(preprocess(pairs(rows), keep_empty, corpus="t")) == len(rows)


def test_max_words_per_side():
    rows = [("a b c", "x y z"), ("a b c d", "w x y z"), ("a b", "x y z")]
    config = PreprocessingConfig(max_length_ratio=None, max_source_words=3, max_target_words=3)
    assert as_rows(preprocess(pairs(rows), config, corpus="t")) == [("a b c", "x y z"), ("a b", "x y z")]
    config = PreprocessingConfig(max_length_ratio=None, max_source_words=2)
    assert as_rows(preprocess(pairs(rows), config, corpus="t")) == [("a b", "x y z")]
    with pytest.raises(ValueError, match=r"removed all 3 pairs of corpus 't'"):
        preprocess(pairs(rows), PreprocessingConfig(max_length_ratio=None, max_target_words=2), corpus="t")


def test_dev_and_test_lose_only_empty_rows():
    rows = [("a b c d", "x"), ("a", "x"), ("a", "x"), ("", "y")]
    config = PreprocessingConfig(max_length_ratio=1.5, max_source_words=2)
    for split in ("dev", "test"):
        assert as_rows(preprocess(pairs(rows), config, corpus="t", split=split)) == rows[:3]


def test_preprocessing_config_validation():
    with pytest.raises(ValueError, match="max_length_ratio must be >= 1"):
        PreprocessingConfig(max_length_ratio=0.5)
    with pytest.raises(ValueError, match="max_source_words"):
        PreprocessingConfig(max_source_words=0)


# --- language tags --------------------------------------------------------------------------------------


def test_add_language_tags_prefixes_source_only():
    tagged = add_language_tags(pairs([("Hello", "Hallo")]), target_tag=">>de<<")
    assert as_rows(tagged) == [(">>de<< Hello", "Hallo")]
    both = add_language_tags(pairs([("Hello", "Hallo")]), target_tag=">>de<<", source_tag=">>en<<")
    assert both["source"] == [">>de<< >>en<< Hello"]
    untouched = pairs([("Hello", "Hallo")])
    assert add_language_tags(untouched, target_tag=None) is untouched


def test_corpus_tags_auto_tags_only_one_to_many():
    o2m = corpus_specs_from_directory(MULTILINGUAL, direction="one-to-many")
    m2o = corpus_specs_from_directory(MULTILINGUAL, direction="many-to-one")
    domains = corpus_specs_from_directory(MULTIDOMAIN, "en", "de")
    assert corpus_tags(o2m) == {lang: f">>{lang}<<" for lang in LANGS}
    assert set(corpus_tags(m2o).values()) == {None}
    assert set(corpus_tags(domains).values()) == {None}
    assert set(corpus_tags(domains, "target").values()) == {">>de<<"}
    assert corpus_tags(o2m, None) == {lang: None for lang in LANGS}
    assert corpus_tags(o2m, {"fr": ">>fra<<"}) == {"cs": None, "de": None, "fr": ">>fra<<", "ko": None}
    with pytest.raises(ValueError, match="tags must be"):
        corpus_tags(o2m, "source")


def test_one_to_many_sources_start_with_the_target_tag(tagged_tokenizer):
    specs = corpus_specs_from_directory(MULTILINGUAL, direction="one-to-many", max_examples=40)
    data = load_corpora(specs, tagged_tokenizer, splits=("train", "dev"))
    assert set(data) == {"train", "dev"}
    for lang in LANGS:
        tag_id = tagged_tokenizer.convert_tokens_to_ids(f">>{lang}<<")
        for split in ("train", "dev"):
            assert {ids[0] for ids in data[split][lang]["input_ids"]} == {tag_id}
            assert all(tag_id not in labels for labels in data[split][lang]["labels"])


def test_many_to_one_sources_carry_no_tag(tagged_tokenizer):
    specs = corpus_specs_from_directory(MULTILINGUAL, target_lang="en", direction="many-to-one", max_examples=40)
    data = load_corpora(specs, tagged_tokenizer, splits=("dev",))
    tag_ids = set(tagged_tokenizer.convert_tokens_to_ids([f">>{lang}<<" for lang in LANGS]))
    assert list(data["dev"]) == LANGS
    for dataset in data["dev"].values():
        assert not tag_ids & {i for ids in dataset["input_ids"] for i in ids}


def test_tags_missing_from_the_vocabulary_are_rejected_before_loading(tagged_tokenizer):
    with pytest.raises(ValueError, match=r"'>>ja<<' is not a single token.*special_tokens=\['>>ja<<'"):
        check_tags_in_vocab(tagged_tokenizer, [">>de<<", ">>ja<<"])
    spec = CorpusSpec("ja", "en", "ja", train="does-not-exist.jsonl")
    with pytest.raises(ValueError, match=">>ja<<"):
        load_corpora([spec], tagged_tokenizer, tags="target")


# --- tokenization -----------------------------------------------------------------------------------------


def test_tokenize_corpus_columns_eos_and_truncation(tagged_tokenizer):
    data = pairs([("Hello world", "Hallo Welt"),
                  ("a much longer source sentence with many words", "ein viel längerer Zielsatz mit vielen Wörtern")])
    tokenized = tokenize_corpus(data, tagged_tokenizer, max_source_length=6, max_target_length=5)
    assert sorted(tokenized.column_names) == ["attention_mask", "input_ids", "labels", "target_text"]
    eos = tagged_tokenizer.eos_token_id
    assert tokenized["target_text"] == data["target"]
    assert [len(ids) for ids in tokenized["input_ids"]][1] == 6 and len(tokenized["labels"][1]) == 5
    for row in tokenized:
        assert row["input_ids"][-1] == eos and row["labels"][-1] == eos
        assert row["attention_mask"] == [1] * len(row["input_ids"])
    untruncated = tokenize_corpus(data, tagged_tokenizer, max_source_length=64, max_target_length=64)
    decoded = [tagged_tokenizer.decode(ids, skip_special_tokens=True) for ids in untruncated["labels"]]
    assert decoded == data["target"]


def test_load_corpora_multidomain_structure(tagged_tokenizer):
    specs = corpus_specs_from_directory(MULTIDOMAIN, "en", "de", corpora=["software", "dictionary"], max_examples=50)
    data = load_corpora(specs, tagged_tokenizer, PreprocessingConfig(max_length_ratio=None, dedupe=False),
                        max_source_length=32)
    assert list(data) == ["train", "dev", "test"]
    expected = {s: ["software", "dictionary"] for s in data}
    assert {split: list(by_corpus) for split, by_corpus in data.items()} == expected
    assert len(data["train"]["software"]) <= 50 and len(data["dev"]["dictionary"]) == 300
    assert max(len(ids) for ids in data["train"]["software"]["input_ids"]) <= 32
    with pytest.raises(ValueError, match="repeated: \\['software'\\]"):
        load_corpora(specs + specs[:1], tagged_tokenizer)
