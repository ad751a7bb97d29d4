"""Data preparation at scale: parallel cleaning and tokenization, the tokenizer's sample, and the preparation cache
that lets a second run of a recipe start training without preparing its data again."""

from __future__ import annotations

import os

import datasets
import pytest
import yaml

from conftest import multidomain_specs
from uat_hf.cli import preparation
from uat_hf.cli import train as cli
from uat_hf.cli.arguments import DEFAULT_TOKENIZER_TRAIN_EXAMPLES, DataArguments, ModelArguments
from uat_hf.cli.recipe import Recipe
from uat_hf.cli.train_data import build_specs, tags_for
from uat_hf.data import preprocessing
from uat_hf.data.audit.report_file import AUDIT_VERSION
from uat_hf.data.corpora import load_corpora, load_corpus_split
from uat_hf.data.corpus_specs import CorpusSpec
from uat_hf.data.preparation_cache import CACHE_FOLDER, spec_fingerprint
from uat_hf.data.tokenization import tokenizer_sample
from uat_hf.utils.logging import set_verbosity

RECIPES = os.path.join(os.path.dirname(__file__), "..", "recipes")


def contents(parts):
    """``{split: {corpus: Dataset}}`` as plain columns, to compare two preparations value for value."""
    return {split: {name: ds.to_dict() for name, ds in corpora.items()} for split, corpora in parts.items()}


def test_two_workers_clean_and_tokenize_exactly_as_one(tokenizer, tmp_path, monkeypatch):
    """With preprocessing_num_workers 2 the strip, filter and tokenize steps run in 2 processes (here on 400-pair
    splits, the threshold lowered) and the result is the same, row for row, as with one."""
    monkeypatch.setattr(preprocessing, "MIN_ROWS_PER_PROCESS", 200)
    used = []
    for method in ("map", "filter"):
        original = getattr(datasets.Dataset, method)

        def recording(self, *args, _original=original, **kwargs):
            used.append(kwargs.get("num_proc"))
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(datasets.Dataset, method, recording)
    prepared = {}
    for workers in (1, 2):
        used.clear()
        prepared[workers] = load_corpora(multidomain_specs(400), tokenizer, max_source_length=48, max_target_length=48,
                                         num_proc=workers, cache_dir=str(tmp_path / str(workers)))
        counts = {n: used.count(n) for n in set(used)}
        assert (counts.get(2, 0) > 0) == (workers == 2), counts
    # strip, filter and tokenize of the 4 train splits (400 pairs) ran in 2 processes; dev/test (300) in one.
    assert counts[2] == 4 * 3
    assert contents(prepared[2]) == contents(prepared[1])


def test_a_small_split_stays_in_one_process():
    rows = datasets.Dataset.from_dict({"source": ["a"] * 30_000, "target": ["b"] * 30_000})
    assert preprocessing._processes(4, rows) == 3 and preprocessing._processes(1, rows) is None
    assert preprocessing._processes(4, rows.select(range(19_999))) is None
    assert preprocessing._processes(None, rows) is None


def test_the_tokenizer_sample_shares_the_limit_by_corpus_size_and_keeps_small_runs_whole():
    big = datasets.Dataset.from_dict({"source": [f"s{i}" for i in range(3000)], "target": ["t"] * 3000})
    small = datasets.Dataset.from_dict({"source": [f"x{i}" for i in range(1000)], "target": ["u"] * 1000})
    assert tokenizer_sample([big, small], 4000) == [big, small]  # the corpora as they are: no select, same order
    sample = tokenizer_sample([big, small], 400)
    assert [len(s) for s in sample] == [300, 100]
    rows = [int(text[1:]) for text in sample[0]["source"]]
    assert rows == sorted(rows) and len(set(rows)) == 300 and rows != list(range(300))  # random rows, file order
    again = tokenizer_sample([big, small], 400)
    assert [s["source"] for s in again] == [s["source"] for s in sample]  # seeded: the same on every run
    assert len(tokenizer_sample([big, small.select(range(1))], 10)[1]) == 1  # every corpus keeps a pair


def test_the_demo_and_every_bundled_recipe_train_their_tokenizer_on_all_pairs():
    """The default sample is larger than the demo's 46,000 training pairs, so its tokenizer, and the README's
    numbers, are those of the full data (tokenizer_sample returns the corpora untouched)."""
    recipe = yaml.safe_load(open(os.path.join(RECIPES, "demo.yaml"), encoding="utf-8"))
    data = DataArguments(**{k: recipe[k] for k in ("corpus_dir", "direction", "source_lang", "target_lang")})
    specs, _ = build_specs(data)
    raw = [load_corpus_split(spec, "train") for spec in specs]
    assert sum(map(len, raw)) == 46_000 < DEFAULT_TOKENIZER_TRAIN_EXAMPLES
    assert tokenizer_sample(raw, ModelArguments().tokenizer_train_examples) == raw


@pytest.mark.parametrize(("make", "field", "value"), [
    (DataArguments, "preprocessing_num_workers", 0),
    (ModelArguments, "tokenizer_train_examples", 0),
    (ModelArguments, "tokenizer_train_examples", -5),
])
def test_bad_values_of_the_new_fields_are_refused_by_name(make, field, value):
    base = {"corpus_dir": "bundled:multidomain-en-de", "source_lang": "en", "target_lang": "de"}
    with pytest.raises(ValueError, match=rf"{field} must be a positive integer .*got {value}"):
        make(**(base if make is DataArguments else {}), **{field: value})


def test_a_preparation_cache_dir_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match=r"preparation_cache_dir '.*file' is a file, not a folder"):
        DataArguments(corpus_dir="bundled:multidomain-en-de", source_lang="en", target_lang="de",
                      preparation_cache_dir=str(tmp_path / "file"))


# --- the preparation cache ----------------------------------------------------------------------------------


def recipe_arguments(tmp_path, corpus_dir, *overrides):
    recipe = {"corpus_dir": str(corpus_dir), "source_lang": "en", "target_lang": "de",
              "corpora": ["bible", "dictionary"], "max_train_examples": 150, "max_eval_examples": 5,
              "max_source_length": 32, "max_target_length": 32, "model_name_or_path": "tiny", "vocab_size": 300,
              "output_dir": str(tmp_path / "out"), "use_cpu": True, "report_to": "none",
              "preparation_cache_dir": str(tmp_path / "cache"), "eval_corpus_specs": [
                  {"name": "software_ood", "source_lang": "en", "target_lang": "de",
                   "test": str(corpus_dir / "software.test.jsonl.gz")}]}
    Recipe(recipe).save_pretrained(tmp_path / "recipe")
    return cli.parse_arguments(["--config", str(tmp_path / "recipe"), *overrides])[:3]


def prepare(training, data, model):
    specs, eval_specs = build_specs(data)
    tag_of, eval_tag_of = tags_for(specs, eval_specs, data.language_tags)
    return preparation.prepare_data(training, data, model, specs, eval_specs, [], tag_of, eval_tag_of)


def bundled_copy(tmp_path):
    """The bundled domains copied, so that a test may touch their files."""
    import shutil

    from conftest import MULTIDOMAIN

    folder = tmp_path / "corpora"
    shutil.copytree(MULTIDOMAIN, folder)
    return folder


def test_a_second_run_reads_the_prepared_data_and_a_changed_field_or_file_does_not(tmp_path, monkeypatch, capsys):
    set_verbosity("info")  # as uat-train shows its progress (the conftest resets it)
    corpora = bundled_copy(tmp_path)
    first = prepare(*recipe_arguments(tmp_path, corpora))
    cache = tmp_path / "cache"
    assert len([p for p in cache.iterdir() if not p.name.startswith(".")]) == 1  # one folder, no temporary left
    assert "saved to the preparation cache" in capsys.readouterr().err

    def no_preparation(*args, **kwargs):
        raise AssertionError("the data was prepared again instead of read from the preparation cache")

    with monkeypatch.context() as patched:
        patched.setattr(preparation, "load_data", no_preparation)
        patched.setattr(preparation, "build_tokenizer", no_preparation)
        # preprocessing_num_workers says how to prepare, not what: the same key.
        second = prepare(*recipe_arguments(tmp_path, corpora, "--preprocessing_num_workers", "2"))
    assert "read from the preparation cache" in capsys.readouterr().err
    tokenizer, *parts = first
    cached_tokenizer, *cached_parts = second
    assert cached_tokenizer.get_vocab() == tokenizer.get_vocab()
    sentence = "In the beginning God created the heavens."
    assert cached_tokenizer(sentence)["input_ids"] == tokenizer(sentence)["input_ids"]
    names = ("train", "dev", "eval")
    assert contents(dict(zip(names, cached_parts[:3]))) == contents(dict(zip(names, parts[:3])))
    assert cached_parts[3] == parts[3] == ["software_ood"]
    assert all(ds.cache_files and str(cache) in ds.cache_files[0]["filename"] for ds in cached_parts[0].values())

    # A changed data field, tokenizer field or corpus file misses the cache and prepares again.
    changed = prepare(*recipe_arguments(tmp_path, corpora, "--max_length_ratio", "1.2"))
    assert len(changed[1]["bible"]) < len(parts[0]["bible"])
    prepare(*recipe_arguments(tmp_path, corpora, "--vocab_size", "280"))
    train_file = corpora / "bible.train.jsonl.gz"
    os.utime(train_file, ns=(train_file.stat().st_atime_ns, train_file.stat().st_mtime_ns + 10**9))
    prepare(*recipe_arguments(tmp_path, corpora))
    assert len([p for p in cache.iterdir() if not p.name.startswith(".")]) == 4

    # preparation_cache: false prepares every time and saves nothing.
    prepare(*recipe_arguments(tmp_path, corpora, "--max_length_ratio", "1.3", "--preparation_cache", "false"))
    assert len(list(cache.iterdir())) == 4


def test_the_audit_reads_the_pairs_the_preparation_cleans_and_is_kept_with_them(tmp_path, monkeypatch):
    """Each training corpus is read and cleaned once, for the audit and the tokenizing both; a second run of the
    recipe reads the audit from the preparation cache, a run with another corpus_audit action the same prepared
    data, and a run with another seed audits again and keeps its own report beside the first."""
    import uat_hf.data.audit as audit_package
    from uat_hf.data import corpora

    cleaned = []
    original = corpora.preprocess

    def counted(dataset, config, *, corpus, split="train", **kwargs):
        cleaned.append((corpus, split))
        return original(dataset, config, corpus=corpus, split=split, **kwargs)

    monkeypatch.setattr(corpora, "preprocess", counted)
    monkeypatch.setattr(preprocessing, "preprocess", counted)  # where the audit's own cleaning would find it
    corpus_dir = bundled_copy(tmp_path)
    first = prepare(*recipe_arguments(tmp_path, corpus_dir, "--corpus_audit", "drop"))
    assert sorted(cleaned) == sorted({*cleaned})  # no split of any corpus cleaned twice
    assert {("bible", "train"), ("dictionary", "train"), ("bible", "dev")} <= set(cleaned)
    report = first[5]
    assert set(report.corpora) == {"bible", "dictionary"} and report.corpora["bible"].pairs == len(first[1]["bible"])
    folder = next(p for p in (tmp_path / "cache").iterdir() if not p.name.startswith("."))
    assert sorted(p.name for p in folder.glob("audit-*")) == [f"audit-v{AUDIT_VERSION}-seed42-sample4000-failing.json"]

    def no_audit(*args, **kwargs):
        raise AssertionError("the corpora were audited again instead of read from the preparation cache")

    with monkeypatch.context() as patched:
        patched.setattr(audit_package, "audit_specs", no_audit)
        again = prepare(*recipe_arguments(tmp_path, corpus_dir, "--corpus_audit", "drop"))
    assert again[5].to_dict() == report.to_dict()
    warned = prepare(*recipe_arguments(tmp_path, corpus_dir, "--corpus_audit", "warn"))  # the same prepared data
    assert warned[5].to_dict() == report.to_dict() and len(list((tmp_path / "cache").iterdir())) == 1
    reseeded = prepare(*recipe_arguments(tmp_path, corpus_dir, "--corpus_audit", "drop", "--seed", "7"))
    assert reseeded[5].seed == 7 and len(list(folder.glob(f"audit-v{AUDIT_VERSION}-seed7-*.json"))) == 1


def test_the_cache_defaults_to_the_datasets_cache_and_skips_unpinned_hub_corpora(tmp_path, monkeypatch):
    from uat_hf.data.preparation_cache import cache_root

    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf"))
    assert cache_root() == tmp_path / "hf" / CACHE_FOLDER
    assert cache_root(None, str(tmp_path / "mine")) == tmp_path / "mine" / CACHE_FOLDER
    assert cache_root(str(tmp_path / "explicit"), str(tmp_path / "mine")) == tmp_path / "explicit"
    unpinned = CorpusSpec(name="wmt", source_lang="en", target_lang="de", path="wmt/wmt14", hub_config="de-en")
    assert spec_fingerprint(unpinned) == (None, "corpus 'wmt' reads the Hub dataset 'wmt/wmt14' without a revision")
    pinned = CorpusSpec(name="wmt", source_lang="en", target_lang="de", path="wmt/wmt14", hub_config="de-en",
                        revision="b199e406369ec1b7634206d76da1f2ab6d7d2cfb")
    assert spec_fingerprint(pinned)[0]["spec"]["revision"] == pinned.revision


def test_a_save_cut_short_is_never_read_and_a_second_saver_keeps_the_first_folder(tmp_path, tokenizer):
    from uat_hf.data.preparation_cache import PreparedData, load_prepared, save_prepared

    rows = datasets.Dataset.from_dict({"input_ids": [[5, 1], [6, 7, 1]], "labels": [[8, 1], [9, 1]]})
    folder = tmp_path / "key"
    (folder / "train" / "0").mkdir(parents=True)  # a folder without its index: never read, replaced on saving
    assert load_prepared(folder) is None
    save_prepared(folder, PreparedData(tokenizer, {"train": {"a": rows}, "dev": {}}, {"out_of_domain": []}))
    loaded = load_prepared(folder)
    assert loaded.parts["train"]["a"].to_dict() == rows.to_dict() and loaded.parts["dev"] == {}
    assert loaded.tokenizer.get_vocab() == tokenizer.get_vocab() and loaded.extra == {"out_of_domain": []}
    other = datasets.Dataset.from_dict({"input_ids": [[4, 1]], "labels": [[4, 1]]})
    save_prepared(folder, PreparedData(tokenizer, {"train": {"a": other}}, {}))  # another process, same key
    assert load_prepared(folder).parts["train"]["a"].to_dict() == rows.to_dict()
    assert [p.name for p in tmp_path.iterdir()] == ["key"]  # no temporary folder left behind
