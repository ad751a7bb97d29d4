"""The paper's corpora in the formats they come in: OPUS Moses pairs, the multi-way TED talks TSV, a Hub dataset
at a revision with chosen data files, and dev/test sets carved out of a one-split corpus with a fixed seed.

Everything is real: small files in each format written to ``tmp_path``, read through ``datasets``. The Hub is
unreachable here (``HF_HUB_OFFLINE=1``, see conftest), so ``revision`` and ``data_files`` are exercised on a local
directory laid out like the Hub's parquet conversion (``datasets.load_dataset`` takes both there too); only the
check that ``revision`` reaches ``load_dataset`` watches the call, and passes it through to the real function.
"""

from __future__ import annotations

import bz2
import gzip
import logging
import lzma
from pathlib import Path

import datasets
import pytest
import yaml

from uat_hf.cli import train as cli
from uat_hf.cli.train_data import build_specs
from uat_hf.data.corpora import CorpusSpec, load_corpus_split
from uat_hf.utils.hub_errors import HubUnavailableError

RECIPES = Path(__file__).resolve().parents[1] / "recipes"
OPENERS = {"": open, ".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}
# A Unicode line separator and a carriage return inside a sentence: a reader splitting on them would misalign.
ENGLISH = ["the cat sleeps", "a dog\u2028barks", 'she said "hello"', "", "tabs\rand returns", "the end"]
GERMAN = ["die Katze schläft", "ein Hund bellt", 'sie sagte "hallo"', "leer", "Tabs und Returns", "das Ende"]


def write_lines(path: Path, lines: list[str]) -> Path:
    compression = next((c for c in OPENERS if c and path.name.endswith(c)), "")
    with OPENERS[compression](path, "wb") as f:
        f.write("".join(line + "\n" for line in lines).encode("utf-8"))
    return path


def rows(dataset: datasets.Dataset) -> list[tuple[str, str]]:
    return list(zip(dataset["source"], dataset["target"]))


def moses(tmp_path: Path, n: int, name: str = "EMEA.de-en") -> str:
    """A Moses pair of ``n`` lines, ``sentence i`` / ``Satz i``; returns the prefix."""
    write_lines(tmp_path / f"{name}.en", [f"sentence {i}" for i in range(n)])
    write_lines(tmp_path / f"{name}.de", [f"Satz {i}" for i in range(n)])
    return str(tmp_path / name)


TED_HEADER = ["talk_name", "en", "de", "fr"]
TED_ROWS = [
    ["talk1", "hello world", "hallo Welt", "bonjour le monde"],
    ["talk1", "no german here", "__NULL__", "pas d'allemand"],
    ["talk2", "spaced null", "_ _ NULL _ _", "nul espacé"],
    ["talk2", "", "leer englisch", "vide"],
    ["talk3", 'quotes "stay" text', '"Anführung" bleibt', "NA"],
    ["talk3", "NA", "null", "__NULL__"],
]


def write_ted(path: Path, table: list[list[str]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join("\t".join(row) + "\n" for row in [TED_HEADER, *table]), encoding="utf-8")
    return path


# --- OPUS Moses ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("compression", ["", ".gz", ".bz2", ".xz"])
def test_moses_pair_reads_line_i_of_both_files_plain_or_compressed(tmp_path, compression):
    write_lines(tmp_path / f"EMEA.de-en.en{compression}", ENGLISH)
    write_lines(tmp_path / "EMEA.de-en.de", GERMAN)  # the two sides need not share a compression
    spec = CorpusSpec("emea", "en", "de", format="moses", train=str(tmp_path / "EMEA.de-en"))
    assert rows(load_corpus_split(spec, "train")) == list(zip(ENGLISH, GERMAN))


def test_moses_suffixes_follow_source_field_and_target_field(tmp_path):
    write_lines(tmp_path / "QED.pt_br-en.pt_br", ["olá"])
    write_lines(tmp_path / "QED.pt_br-en.en", ["hello"])
    spec = CorpusSpec("qed", "pt", "en", format="moses", source_field="pt_br", train=str(tmp_path / "QED.pt_br-en"))
    assert rows(load_corpus_split(spec, "train")) == [("olá", "hello")]


def test_moses_files_of_different_lengths_are_refused_naming_both_files_and_counts(tmp_path):
    write_lines(tmp_path / "KDE4.de-en.en", ["one", "two", "three", "four"])
    write_lines(tmp_path / "KDE4.de-en.de.gz", ["eins", "zwei", "drei"])
    spec = CorpusSpec("kde4", "en", "de", format="moses", train=str(tmp_path / "KDE4.de-en"))
    with pytest.raises(ValueError) as error:
        load_corpus_split(spec, "train")
    message = str(error.value)
    assert message.startswith("Corpus 'kde4' split 'train': the Moses files are not aligned")
    assert f"{str(tmp_path / 'KDE4.de-en.en')!r} has 4 lines" in message
    assert f"{str(tmp_path / 'KDE4.de-en.de.gz')!r} has 3" in message


def test_moses_missing_side_names_the_prefix_and_the_file(tmp_path):
    write_lines(tmp_path / "Tanzil.de-en.en", ["one"])
    spec = CorpusSpec("tanzil", "en", "de", format="moses", train=str(tmp_path / "Tanzil.de-en"))
    with pytest.raises(FileNotFoundError, match=r"Corpus 'tanzil' split 'train': Moses file .*Tanzil\.de-en\.de not"):
        load_corpus_split(spec, "train")


def test_moses_text_that_is_not_utf8_names_the_file_and_line(tmp_path):
    write_lines(tmp_path / "EMEA.de-en.en", ["one", "two"])
    (tmp_path / "EMEA.de-en.de").write_bytes(b"eins\nzw\xe4i\n")
    spec = CorpusSpec("emea", "en", "de", format="moses", train=str(tmp_path / "EMEA.de-en"))
    with pytest.raises(ValueError, match=r"Corpus 'emea' split 'train': .*EMEA\.de-en\.de' is not valid UTF-8 text: "
                                         r"line 2 has the byte 0xe4"):
        load_corpus_split(spec, "train")


def test_moses_file_edited_after_a_load_is_read_again(tmp_path):
    prefix = moses(tmp_path, 3)
    spec = CorpusSpec("emea", "en", "de", format="moses", train=prefix)
    assert len(load_corpus_split(spec, "train")) == 3
    prefix = moses(tmp_path, 5)  # same paths, new content: the cache must not serve the old pairs
    assert rows(load_corpus_split(spec, "train"))[-1] == ("sentence 4", "Satz 4")


# --- TED talks TSV ----------------------------------------------------------------------------------------------


def test_ted_talks_tsv_pairs_two_language_columns_and_logs_dropped_rows(tmp_path, caplog):
    file = write_ted(tmp_path / "all_talks_train.tsv", TED_ROWS)
    spec = CorpusSpec("de_en", "de", "en", format="ted_talks", train=str(file))
    with caplog.at_level(logging.INFO, logger="uat_hf.data.corpus_formats"):
        pairs = load_corpus_split(spec, "train")
    # __NULL__, "_ _ NULL _ _" and empty cells are missing; quotes, "NA" and "null" are ordinary text.
    assert rows(pairs) == [("hallo Welt", "hello world"), ('"Anführung" bleibt', 'quotes "stay" text'),
                           ("null", "NA")]
    assert "3 of 6 rows" in caplog.text and "'de' or 'en' translation" in caplog.text


def test_ted_talks_directory_gives_the_three_all_talks_splits(tmp_path):
    for split in ("train", "dev", "test"):
        write_ted(tmp_path / "ted_talks" / f"all_talks_{split}.tsv", [["t", f"{split} en", f"{split} de", "x"]])
    spec = CorpusSpec("fra", "fr", "en", format="ted_talks", path=str(tmp_path / "ted_talks"))
    assert {split: rows(load_corpus_split(spec, split)) for split in ("train", "dev", "test")} == {
        split: [("x", f"{split} en")] for split in ("train", "dev", "test")
    }


def test_ted_talks_unknown_language_column_lists_the_columns(tmp_path):
    file = write_ted(tmp_path / "all_talks_dev.tsv", TED_ROWS)
    spec = CorpusSpec("kor", "ko", "en", format="ted_talks", dev=str(file))
    with pytest.raises(ValueError, match=r"Corpus 'kor' split 'dev': .* has no source language column 'ko'; its "
                                         r"columns: \['talk_name', 'en', 'de', 'fr'\]"):
        load_corpus_split(spec, "dev")


# --- carve: dev/test out of a one-split corpus -----------------------------------------------------------------


def carved(spec: CorpusSpec) -> dict[str, list[tuple[str, str]]]:
    return {split: rows(load_corpus_split(spec, split)) for split in ("train", "dev", "test")}


def test_carve_follows_its_seed_and_keeps_dev_test_and_train_disjoint(tmp_path):
    prefix = moses(tmp_path, 50)
    spec = CorpusSpec("emea", "en", "de", format="moses", train=prefix, carve_dev=5, carve_test=7, carve_seed=3)
    first = carved(spec)
    assert {split: len(pairs) for split, pairs in first.items()} == {"train": 38, "dev": 5, "test": 7}
    assert first == carved(CorpusSpec(**{**vars(spec)}))  # the same seed carves the same pairs
    assert sorted(sum(first.values(), [])) == sorted(rows(load_corpus_split(CorpusSpec("all", "en", "de",
                                                                                         format="moses",
                                                                                         train=prefix), "train")))
    other = carved(CorpusSpec("emea", "en", "de", format="moses", train=prefix, carve_dev=5, carve_test=7))
    assert other["test"] != first["test"]
    # More dev pairs leave the test set as it was.
    assert carved(CorpusSpec(**{**vars(spec), "carve_dev": 9}))["test"] == first["test"]


def test_carve_drops_training_pairs_identical_to_a_carved_one(tmp_path):
    # Ten copies of one pair among 30: wherever the carve puts one copy, the training copies go.
    write_lines(tmp_path / "KDE4.de-en.en", ["File"] * 10 + [f"sentence {i}" for i in range(20)])
    write_lines(tmp_path / "KDE4.de-en.de", ["Datei"] * 10 + [f"Satz {i}" for i in range(20)])
    spec = CorpusSpec("kde4", "en", "de", format="moses", train=str(tmp_path / "KDE4.de-en"), carve_test=12)
    train, test = rows(load_corpus_split(spec, "train")), rows(load_corpus_split(spec, "test"))
    assert ("File", "Datei") in test  # 12 of 30 with 10 copies: a copy is carved for this seed
    assert ("File", "Datei") not in train and not set(train) & set(test)
    assert len(train) == 18 - (10 - test.count(("File", "Datei")))  # the 18 not carved, less their copies
    assert spec.split_location("dev") is None  # no dev split: only test is carved


def test_carve_applies_to_any_source_and_max_examples_cuts_train_after_it(tmp_path):
    file = tmp_path / "law.tsv"
    file.write_text("".join(f"law {i}\tGesetz {i}\n" for i in range(20)), encoding="utf-8")
    spec = CorpusSpec("law", "en", "de", train=str(file), carve_dev=4, max_examples=6)
    train, dev = rows(load_corpus_split(spec, "train")), rows(load_corpus_split(spec, "dev"))
    assert len(train) == 6 and len(dev) == 4 and not set(train) & set(dev)
    assert train == sorted(train, key=lambda pair: int(pair[0].split()[1]))  # the source's order is kept


def test_carve_larger_than_the_corpus_is_refused(tmp_path):
    spec = CorpusSpec("emea", "en", "de", format="moses", train=moses(tmp_path, 10), carve_dev=5, carve_test=5)
    with pytest.raises(ValueError, match=r"Corpus 'emea': carve_dev=5 and carve_test=5 would take 10 of the 10 pairs"):
        load_corpus_split(spec, "dev")


# --- Hub datasets: revision and data_files ----------------------------------------------------------------------


def parquet_export(root: Path) -> Path:
    """A dataset repository laid out like the Hub's parquet conversion (refs/convert/parquet): CONFIG/SPLIT/*.parquet,
    two configs side by side."""
    for config, (src, tgt) in {"de-en": ("de", "en"), "fr-en": ("fr", "en")}.items():
        for split, n in (("train", 3), ("validation", 2), ("test", 2)):
            folder = root / config / split
            folder.mkdir(parents=True)
            table = [{"translation": {src: f"{config} {split} {i} {src}", tgt: f"{split} {i} {tgt}"}}
                     for i in range(n)]
            datasets.Dataset.from_list(table).to_parquet(str(folder / "0000.parquet"))
    return root


DE_EN_FILES = {split: f"de-en/{split}/*.parquet" for split in ("train", "validation", "test")}


def test_data_files_pick_one_config_of_a_parquet_export(tmp_path):
    repo = parquet_export(tmp_path / "wmt14")
    spec = CorpusSpec("wmt14", "en", "de", path=str(repo), data_files=DE_EN_FILES)
    assert rows(load_corpus_split(spec, "dev")) == [(f"validation {i} en", f"de-en validation {i} de") for i in (0, 1)]
    assert len(load_corpus_split(spec, "train")) == 3  # fr-en's files stay out


def test_data_files_as_one_pattern_is_the_train_split_and_can_be_carved(tmp_path):
    repo = parquet_export(tmp_path / "wmt14")
    spec = CorpusSpec("wmt14", "en", "de", path=str(repo), data_files="de-en/train/*.parquet")
    assert spec.split_location("dev") is None and spec.split_location("test") is None
    carve = CorpusSpec("wmt14", "en", "de", path=str(repo), data_files="de-en/train/*.parquet", carve_test=1)
    assert len(load_corpus_split(carve, "train")) == 2 and len(load_corpus_split(carve, "test")) == 1


def test_revision_and_data_files_reach_load_dataset(tmp_path, monkeypatch):
    repo = parquet_export(tmp_path / "wmt14")
    calls = []
    real_load_dataset = datasets.load_dataset

    def watched(*args, **kwargs):
        calls.append(kwargs)
        return real_load_dataset(*args, **kwargs)

    monkeypatch.setattr(datasets, "load_dataset", watched)
    spec = CorpusSpec("wmt14", "en", "de", path=str(repo), revision="refs/convert/parquet", data_files=DE_EN_FILES)
    assert len(load_corpus_split(spec, "test")) == 2
    assert calls[-1]["revision"] == "refs/convert/parquet" and calls[-1]["data_files"] == DE_EN_FILES
    assert calls[-1]["split"] == "test"


def test_revision_of_an_unreachable_hub_dataset_is_named_in_the_error(tmp_path):
    spec = CorpusSpec("wmt14", "en", "de", path="uat-hf-tests/no-such-wmt14", revision="refs/convert/parquet",
                      data_files=DE_EN_FILES)
    with pytest.raises(HubUnavailableError, match=r"Corpus 'wmt14' split 'train' \(revision 'refs/convert/parquet'\): "
                                                  r"could not load dataset 'uat-hf-tests/no-such-wmt14'"):
        load_corpus_split(spec, "train", cache_dir=str(tmp_path / "cache"))


# --- spec fields: errors name the corpus, the field and the value -----------------------------------------------


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"format": "opus"}, "Corpus 'c': format 'opus' is not one of ['moses', 'ted_talks']"),
        ({"train": "x.tsv", "revision": "main"}, "Corpus 'c': revision 'main' needs path"),
        ({"format": "moses", "train": "x", "data_files": "a.parquet"},
         "Corpus 'c': data_files 'a.parquet' is for datasets.load_dataset; format 'moses' reads its files itself"),
        ({"path": "org/name", "data_files": {"train": 3}}, "Corpus 'c': data_files must be a file pattern"),
        ({"format": "moses", "path": "data/opus"}, "Corpus 'c': format 'moses' reads file prefixes"),
        ({"train": "x.tsv", "dev": "y.tsv", "carve_dev": 100},
         "Corpus 'c': carve_dev=100 carves the dev split out of train, but dev is given too ('y.tsv')"),
        ({"train": "x.tsv", "carve_test": 0}, "Corpus 'c': carve_test must be a positive number of pairs, got 0"),
        ({"train": "x.tsv", "carve_test": "2000"}, "carve_test must be a positive number of pairs, got '2000'"),
        ({"train": "x.tsv", "carve_seed": 3}, "Corpus 'c': carve_seed 3 has no effect without carve_dev or carve_"),
        ({"test": "x.tsv", "carve_dev": 10}, "Corpus 'c': carve_dev/carve_test carve pairs out of the train split"),
    ],
)
def test_spec_fields_that_contradict_are_refused_naming_corpus_field_and_value(fields, message):
    with pytest.raises(ValueError) as error:
        CorpusSpec("c", "en", "de", **fields)
    assert message in str(error.value)


# --- uat-train: the recipe dialect and the CLI's loading path ---------------------------------------------------


def recipe_fields(tmp_path: Path, corpus_specs: list[dict], **extra) -> dict:
    return {
        "output_dir": str(tmp_path / "out"), "strategy": "multiuat", "measure": "enteos", "mc_samples": 2,
        "update_every": 1, "corpus_specs": corpus_specs, "model_name_or_path": "tiny", "vocab_size": 200,
        "max_source_length": 16, "max_target_length": 16, "max_steps": 2, "max_tokens": 200, "save_strategy": "no",
        "eval_strategy": "no", "generation_num_beams": 1, "generation_max_length": 4, "use_cpu": True,
        "report_to": "none", "disable_tqdm": True, "seed": 0, **extra,
    }


def test_uat_train_loads_a_moses_and_a_ted_talks_corpus_through_its_own_path(tmp_path, capsys):
    opus = tmp_path / "opus"
    opus.mkdir()
    prefix = moses(opus, 60)
    table = [["t", f"talk sentence {i}", f"Vortrag Satz {i}", "__NULL__" if i % 3 else "x"] for i in range(40)]
    for split in ("train", "dev", "test"):
        write_ted(tmp_path / "ted_talks" / f"all_talks_{split}.tsv", table if split == "train" else table[:6])
    write_lines(opus / "QED.de-en.en", [f"qed {i}" for i in range(30)])
    write_lines(opus / "QED.de-en.de", [f"QED {i}" for i in range(30)])
    fields = recipe_fields(tmp_path, [
        {"name": "emea", "source_lang": "en", "target_lang": "de", "format": "moses", "train": prefix,
         "carve_dev": 6, "carve_test": 6, "carve_seed": 1},
        {"name": "ted", "source_lang": "en", "target_lang": "de", "format": "ted_talks",
         "path": str(tmp_path / "ted_talks")},
    ], eval_corpus_specs=[{"name": "qed", "source_lang": "en", "target_lang": "de", "format": "moses",
                           "train": str(opus / "QED.de-en"), "carve_test": 5}])
    config = tmp_path / "recipe.yaml"
    config.write_text(yaml.safe_dump(fields, sort_keys=False), encoding="utf-8")

    training, data, model, run_args, _ = cli.parse_arguments(["--config", str(config)])
    specs, eval_specs = build_specs(data)
    assert [(s.name, s.format, s.carve_dev) for s in specs] == [("emea", "moses", 6), ("ted", "ted_talks", None)]
    trainer, eval_corpora, ood = cli.prepare(training, data, model, run_args)
    assert {name: len(ds) for name, ds in trainer.train_corpora.items()} == {"emea": 48, "ted": 40}
    assert {name: len(ds) for name, ds in trainer.dev_corpora.items()} == {"emea": 6, "ted": 6}
    assert {name: len(ds) for name, ds in eval_corpora.items()} == {"emea": 6, "ted": 6, "qed": 5} and ood == ["qed"]

    assert cli.main(["--config", str(config)]) == 0  # and it trains and evaluates
    assert "qed" in capsys.readouterr().out


def test_uat_train_refuses_an_unknown_or_contradictory_spec_field(tmp_path, capsys):
    spec = {"name": "emea", "source_lang": "en", "target_lang": "de", "format": "moses", "train": "data/EMEA.de-en"}
    for extra, message in (({"carve_size": 10}, "unknown field(s) ['carve_size']"),
                           ({"dev": "data/EMEA.dev", "carve_dev": 10},
                            "Corpus 'emea': carve_dev=10 carves the dev split out of train")):
        config = tmp_path / "recipe.yaml"
        config.write_text(yaml.safe_dump(recipe_fields(tmp_path, [{**spec, **extra}])), encoding="utf-8")
        assert cli.main(["--config", str(config)]) == 2
        assert message in capsys.readouterr().err


def test_paper_recipes_name_the_moses_ted_talks_and_parquet_routes():
    multidomain = yaml.safe_load((RECIPES / "multidomain_wmt14_tanzil_emea_kde4.yaml").read_text(encoding="utf-8"))
    specs = {spec["name"]: spec for spec in multidomain["corpus_specs"] + multidomain["eval_corpus_specs"]}
    assert specs["wmt14"]["revision"] == "refs/convert/parquet" and specs["wmt14"]["path"] == "wmt/wmt14"
    assert all(specs[n]["format"] == "moses" and specs[n]["carve_test"] for n in ("tanzil", "emea", "kde4", "qed"))
    text = (RECIPES / "multidomain_wmt14_tanzil_emea_kde4.yaml").read_text(encoding="utf-8")
    assert "https://object.pouta.csc.fi/OPUS-EMEA/v3/moses/de-en.txt.zip" in text and "for c in" not in text
    for name in ("ted8_related_m2o", "ted8_related_o2m", "ted8_diverse_m2o", "ted8_diverse_o2m"):
        recipe = yaml.safe_load((RECIPES / f"{name}.yaml").read_text(encoding="utf-8"))
        assert len(recipe["corpus_specs"]) == 8, name
        assert {spec["format"] for spec in recipe["corpus_specs"]} == {"ted_talks"}, name
        assert "http://phontron.com/data/ted_talks.tar.gz" in (RECIPES / f"{name}.yaml").read_text(encoding="utf-8")
