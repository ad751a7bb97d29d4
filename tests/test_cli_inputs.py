"""``uat-train`` on bad or unusual input from a fresh machine: clear errors before training, naming the culprit.

Everything is real: corpora written to ``tmp_path``, a MarianTokenizer built from a sentencepiece model trained
here, a tiny Marian checkpoint saved to disk. The Hub is unreachable (``HF_HUB_OFFLINE=1``, see conftest).
"""

from __future__ import annotations

import gzip
import itertools
import json

import datasets
import pytest
import yaml

from conftest import save_marian_tokenizer
from uat_hf.cli import train as cli
from uat_hf.cli.run_tokenizer import build_tokenizer
from uat_hf.cli.train_data import build_specs, tags_for
from uat_hf.data.corpora import BUNDLED_DIR
from uat_hf.data.tokenization import check_tags_in_vocab, load_tokenizer

MULTILINGUAL = BUNDLED_DIR / "multilingual-ddtp"
TAGS = [">>de<<", ">>fr<<"]

# A tiny one-to-many run (en → de, fr): the corpora carry target-language tags.
RUN = {
    "strategy": "temperature",
    "corpus_dir": "bundled:multilingual-ddtp",
    "direction": "one-to-many",
    "source_lang": "en",
    "corpora": ["de", "fr"],
    "max_train_examples": 40,
    "max_eval_examples": 2,
    "max_source_length": 32,
    "max_target_length": 32,
    "model_name_or_path": "tiny",
    "vocab_size": 300,
    "max_steps": 2,
    "max_tokens": 300,
    "learning_rate": "3e-3",
    "save_strategy": "no",
    "eval_strategy": "no",
    "generation_num_beams": 1,
    "generation_max_length": 6,
    "per_device_eval_batch_size": 4,
    "use_cpu": True,
    "seed": 0,
    "report_to": "none",
    "disable_tqdm": True,
}
SPEC = {"name": "news", "source_lang": "en", "target_lang": "de"}


def write_recipe(tmp_path, fields: dict):
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(fields, sort_keys=False), encoding="utf-8")
    return path


def run_cli(tmp_path, capsys, argv=(), **changes) -> tuple[int, str, str]:
    fields = {"output_dir": str(tmp_path / "out"), **RUN, **changes}
    if "corpus_specs" in changes:
        for key in ("corpus_dir", "corpora", "direction", "source_lang"):
            fields.pop(key, None)
    code = cli.main(["--config", str(write_recipe(tmp_path, fields)), *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def error_of(code: int, err: str) -> str:
    """The message of ``uat-train: error: ...`` (datasets progress bars may precede it on stderr)."""
    assert code == 2 and "uat-train: error: " in err, err
    assert "Traceback" not in err
    return err.split("uat-train: error: ", 1)[1].strip()


def bundled_texts(n: int = 300) -> list[str]:
    texts = []
    for lang in ("de", "fr"):
        with gzip.open(MULTILINGUAL / f"{lang}.train.jsonl.gz", "rt", encoding="utf-8") as f:
            texts += [t for line in itertools.islice(f, n) for t in json.loads(line)["translation"].values()]
    return texts


@pytest.fixture(scope="module")
def marian_dir(tmp_path_factory):
    """A MarianTokenizer (sentencepiece source/target models + vocab.json) without language tags, saved with
    save_pretrained, next to a tiny MarianMTModel sized to it: a pretrained opus-mt-like checkpoint."""
    from uat_hf.models.presets import build_model

    checkpoint = tmp_path_factory.mktemp("marian") / "checkpoint"
    tokenizer = save_marian_tokenizer(bundled_texts(), checkpoint, vocab_size=400)
    build_model("tiny", tokenizer).save_pretrained(checkpoint)
    return checkpoint


# --- 1. a pretrained tokenizer without the language tags -------------------------------------------------


@pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")
def test_a_pretrained_tokenizer_without_the_tags_gets_them_as_single_tokens(marian_dir, tmp_path):
    plain = load_tokenizer(str(marian_dir))
    with pytest.raises(ValueError, match="is not a single token"):
        check_tags_in_vocab(plain, TAGS)
    _, data, model, _, _ = cli.parse_arguments(
        ["--config", str(write_recipe(tmp_path, RUN)), "--tokenizer_name_or_path", str(marian_dir),
         "--output_dir", str(tmp_path / "out")]
    )
    specs, eval_specs = build_specs(data)
    tag_of, eval_tag_of = tags_for(specs, eval_specs, data.language_tags)
    tags = sorted({t for t in tag_of.values() if t})
    assert tags == TAGS
    tokenizer = build_tokenizer(model, specs, tags, data)
    check_tags_in_vocab(tokenizer, TAGS)
    assert len(tokenizer) == len(plain) + 2
    # The special tokens it had are kept, ordinary text encodes as before, and a tag decodes away.
    assert (tokenizer.eos_token, tokenizer.unk_token, tokenizer.pad_token) == (
        plain.eos_token, plain.unk_token, plain.pad_token
    )
    sentence = "The package contains the files."
    assert tokenizer(sentence)["input_ids"] == plain(sentence)["input_ids"]
    tagged = tokenizer(f">>fr<< {sentence}")["input_ids"]
    assert tagged[0] == tokenizer.convert_tokens_to_ids(">>fr<<") and tagged[1:] == plain(sentence)["input_ids"]
    expected = plain.decode(plain(sentence)["input_ids"], skip_special_tokens=True)
    assert tokenizer.decode(tagged, skip_special_tokens=True) == expected


@pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")
def test_a_pretrained_checkpoint_without_the_tags_trains_with_them(marian_dir, tmp_path, capsys):
    """uat-train on the checkpoint: the tags are added to its tokenizer and the embeddings grow to match."""
    code, out, err = run_cli(tmp_path, capsys, model_name_or_path=str(marian_dir))
    assert code == 0, err
    assert "adding language tags ['>>de<<', '>>fr<<']" in err
    saved = load_tokenizer(str(tmp_path / "out"))
    check_tags_in_vocab(saved, TAGS)
    from transformers import AutoModelForSeq2SeqLM

    trained = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "out")
    assert trained.get_input_embeddings().num_embeddings == len(saved) == len(load_tokenizer(str(marian_dir))) + 2
    assert trained.final_logits_bias.shape[-1] == len(saved)


# --- 2., 5. corpus files: invalid UTF-8, two files for one split --------------------------------------------


def test_invalid_utf8_in_a_corpus_file_exits_2_naming_file_and_line(tmp_path, capsys):
    bad = tmp_path / "news.tsv"
    bad.write_bytes(b"Hello\tHallo\nThe coffee\tDer Kaffee\nMy caf\xe9\tMein Caf\xe9\n")
    code, out, err = run_cli(tmp_path, capsys, corpus_specs=[{**SPEC, "train": str(bad), "test": str(bad)}])
    message = error_of(code, err)
    assert message.startswith("Corpus 'news' split 'train'")
    assert repr(str(bad)) in message and "line 3" in message and "not valid UTF-8" in message


def test_two_files_for_one_split_in_corpus_dir_exits_2_naming_both(tmp_path, capsys):
    corpus_dir = tmp_path / "corpora"
    corpus_dir.mkdir()
    rows = "".join(json.dumps({"translation": {"en": f"s {i}", "de": f"S {i}"}}) + "\n" for i in range(4))
    (corpus_dir / "news.train.jsonl").write_text(rows, encoding="utf-8")
    with gzip.open(corpus_dir / "news.train.jsonl.gz", "wt", encoding="utf-8") as f:
        f.write(rows)
    code, out, err = run_cli(tmp_path, capsys, corpus_dir=str(corpus_dir), corpora=None, direction="multi-domain",
                             target_lang="de")
    message = error_of(code, err)
    assert "'news.train.jsonl'" in message and "'news.train.jsonl.gz'" in message and str(corpus_dir) in message


# --- 3. Hub ids while offline ---------------------------------------------------------------------------------


def test_offline_hub_dataset_exits_2_with_what_to_do(tmp_path, capsys):
    assert datasets.config.HF_HUB_OFFLINE, "the tests run with HF_HUB_OFFLINE=1 (conftest)"
    code, out, err = run_cli(
        tmp_path, capsys, ["--dataset_cache_dir", str(tmp_path / "cache")],
        corpus_specs=[{**SPEC, "path": "uat-hf-tests/no-such-dataset"}],
    )
    message = error_of(code, err)
    assert message.startswith("Corpus 'news' split 'train': could not load dataset 'uat-hf-tests/no-such-dataset' "
                              "from the Hugging Face Hub")
    assert "HF_HUB_OFFLINE" in message and "local path" in message


def test_offline_hub_tokenizer_exits_2_with_what_to_do(tmp_path, capsys):
    code, out, err = run_cli(tmp_path, capsys, ["--tokenizer_name_or_path", "uat-hf-tests/no-such-tokenizer"])
    message = error_of(code, err)
    assert message.startswith("could not load tokenizer 'uat-hf-tests/no-such-tokenizer' from the Hugging Face Hub")
    assert "HF_HUB_OFFLINE" in message and "local path" in message


def test_offline_hub_model_and_recipe_say_what_to_do(tmp_path, capsys):
    from uat_hf.cli.recipe import Recipe
    from uat_hf.models.presets import build_model
    from uat_hf.utils.hub_errors import HubUnavailableError

    tokenizer = None  # the model fails to load before the tokenizer is looked at
    with pytest.raises(HubUnavailableError, match=r"could not load model 'uat-hf-tests/no-such-model' from the "
                       r"Hugging Face Hub: offline mode is on \(HF_HUB_OFFLINE\).*give a local path instead"):
        build_model("uat-hf-tests/no-such-model", tokenizer)
    with pytest.raises(HubUnavailableError, match=r"could not load recipe 'uat-hf-tests/no-such-recipe' from the "
                       r"Hugging Face Hub: offline mode is on"):
        Recipe.from_pretrained("uat-hf-tests/no-such-recipe")
    assert cli.main(["--config", "uat-hf-tests/no-such-recipe"]) == 2
    assert "uat-train: error: could not load recipe 'uat-hf-tests/no-such-recipe'" in capsys.readouterr().err


# --- 4. output_dir ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("inside", [False, True])
def test_output_dir_that_is_a_file_fails_before_anything_is_trained(tmp_path, capsys, inside):
    blocker = tmp_path / "results.txt"
    blocker.write_text("not a directory\n", encoding="utf-8")
    output_dir = blocker / "run1" if inside else blocker
    code, out, err = run_cli(tmp_path, capsys, output_dir=str(output_dir))
    message = error_of(code, err)
    assert message.startswith(f"output_dir {str(output_dir)!r}")
    assert f"{str(blocker)!r} is a file" in message
    assert "tokenizer:" not in out  # nothing was trained, not even the tokenizer
    assert blocker.read_text(encoding="utf-8") == "not a directory\n"
