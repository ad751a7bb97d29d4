"""Streamed training corpora (uat_hf.data.streams, uat_hf.sampling.stream_batches): real IterableDatasets read from
the bundled files, a real tokenizer and a tiny real model; resume must continue the exact batch sequence."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import datasets
import numpy as np
import pytest
import torch
import yaml

from conftest import launch_two_ranks, multidomain_specs
from uat_hf.data.corpora import CorpusSpec, PreprocessingConfig
from uat_hf.data.streams import load_corpus_stream, prepare_stream, stream_size, streamed_size
from uat_hf.models.presets import build_model
from uat_hf.sampling.distribution import CorpusDistribution
from uat_hf.sampling.stream_batches import StreamBatchSampler
from uat_hf.training.uat_config import UATConfig
from uat_hf.training.uat_trainer import UATTrainer
from uat_hf.utils.checkpoints import BALANCING_STATE_FILE, HISTORY_FILE, STREAM_STATE_FILE

pytestmark = pytest.mark.usefixtures("one_torch_thread")
NAMES = ("bible", "software")
HERE = Path(__file__).parent


def json_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def streams(tokenizer, max_examples=150, names=NAMES):
    out = {}
    for spec in multidomain_specs(max_examples):
        if spec.name in names:
            pairs = load_corpus_stream(spec)
            out[spec.name] = prepare_stream(
                pairs, tokenizer, PreprocessingConfig(dedupe=False), max_source_length=48, max_target_length=48
            )
    return out


class RecordingTrainer(UATTrainer):
    def training_step(self, model, inputs, num_items_in_batch=None):
        self.trained_batches = getattr(self, "trained_batches", [])
        self.trained_batches.append(inputs["input_ids"].tolist())
        return super().training_step(model, inputs, num_items_in_batch)


def run(corpora, tokenizer, output, resume=None, strategy="multiuat", max_steps=11, **settings):
    torch.manual_seed(0)
    model = build_model("tiny", tokenizer)
    dynamic = {"measure": "exptp", "update_every": 3, "scorer_lr": 1e-2, "scorer_steps": 20, "mc_samples": 2}
    args = UATConfig(
        output_dir=str(output),
        strategy=strategy,
        max_steps=max_steps,
        max_tokens=300,
        learning_rate=2e-3,
        warmup_steps=2,
        save_strategy="steps",
        report_to=[],
        use_cpu=True,
        seed=7,
        disable_tqdm=True,
        logging_steps=100,
        stream_buffer_examples=16,
        **(dynamic if strategy == "multiuat" else {}),
        **{"save_steps": 5, **settings},
    )
    trainer = RecordingTrainer(
        model,
        args,
        train_corpora=streams(tokenizer),
        processing_class=tokenizer,
        dev_corpora={n: corpora["dev"][n] for n in NAMES},
    )
    trainer.train(resume_from_checkpoint=resume)
    history = [json.loads(line) for line in (output / HISTORY_FILE).read_text().splitlines()]
    return trainer, history


def test_a_stream_reads_the_bundled_file_lazily_with_its_size_from_a_line_count(tokenizer):
    spec = next(s for s in multidomain_specs(None) if s.name == "bible")
    stream = load_corpus_stream(spec)
    assert isinstance(stream, datasets.IterableDataset)
    assert streamed_size(stream) == stream_size(spec) == 9000  # lines of bible.train.jsonl.gz
    tokenized = prepare_stream(
        stream, tokenizer, PreprocessingConfig(dedupe=False), max_source_length=16, max_target_length=16
    )
    first = next(iter(tokenized))
    assert sorted(first) == ["attention_mask", "input_ids", "labels"] and len(first["input_ids"]) <= 16
    spec.max_examples, spec.num_examples = 100, 5000
    assert stream_size(spec) == 100 and sum(1 for _ in load_corpus_stream(spec)) == 100


def test_a_line_count_is_read_again_when_the_file_changes(tmp_path):
    """The count is kept for the run (a stream's size is asked for more than once), keyed by the file's version."""
    path = tmp_path / "pairs.jsonl"
    row = json.dumps({"translation": {"en": "a house", "de": "ein Haus"}})
    path.write_text(f"{row}\n\n{row}\n")
    spec = CorpusSpec("web", "en", "de", train=str(path))
    assert stream_size(spec) == 2  # the blank line is not a pair
    path.write_text(f"{row}\n" * 5)
    assert stream_size(spec) == 5


def test_moses_pairs_stream_line_by_line_with_their_size_from_a_line_count(tmp_path):
    (tmp_path / "EMEA.de-en.en").write_text("one\ntwo words\nthree\n")
    (tmp_path / "EMEA.de-en.de").write_text("eins\nzwei Worte\ndrei\n")
    spec = CorpusSpec("emea", "en", "de", format="moses", train=str(tmp_path / "EMEA.de-en"))
    stream = load_corpus_stream(spec)
    assert list(stream) == [
        {"source": "one", "target": "eins"},
        {"source": "two words", "target": "zwei Worte"},
        {"source": "three", "target": "drei"},
    ]
    assert streamed_size(stream) == 3
    with pytest.raises(ValueError, match="Corpus 'emea': num_examples must be a positive number of pairs, got 0"):
        CorpusSpec("emea", "en", "de", format="moses", train=str(tmp_path / "EMEA.de-en"), num_examples=0)


@pytest.mark.parametrize(
    "field, value, message", [("carve_dev", 10, "carve_dev/carve_test"), ("dedupe", True, "dedupe: true")]
)
def test_what_needs_the_whole_corpus_is_refused_naming_corpus_and_field(field, value, message):
    from uat_hf.data.streams import check_streamable

    spec = CorpusSpec("law", "en", "de", train="x.jsonl", **({field: value} if field != "dedupe" else {}))
    with pytest.raises(ValueError, match=f"Corpus 'law' is streamed.*{message}"):
        check_streamable(spec, PreprocessingConfig(dedupe=field == "dedupe"))


def test_a_temperature_prior_over_a_stream_of_unknown_size_is_refused_naming_it(tmp_path, tokenizer, corpora):
    unsized = streams(tokenizer)
    unsized["software"].info.splits = None
    args = UATConfig(
        output_dir=str(tmp_path), strategy="temperature", max_steps=2, max_tokens=300, report_to=[], use_cpu=True
    )
    with pytest.raises(ValueError, match="size of streamed corpus 'software' is unknown.*num_examples"):
        UATTrainer(build_model("tiny", tokenizer), args, train_corpora=unsized, processing_class=tokenizer)
    fixed = UATConfig(
        output_dir=str(tmp_path),
        strategy="fixed",
        corpus_probabilities={"bible": 0.3, "software": 0.7},
        max_steps=2,
        max_tokens=300,
        report_to=[],
        use_cpu=True,
    )
    # A hand-given prior needs no sizes.
    UATTrainer(build_model("tiny", tokenizer), fixed, train_corpora=unsized, processing_class=tokenizer)


@pytest.mark.parametrize(
    "settings, message",
    [
        (
            {"mix_corpora": True},
            "mix_corpora draws every example's corpus, but training corpora \\['bible', 'software'\\]",
        ),
        ({"max_steps": -1}, "a stream has no epochs to count .num_train_epochs., so set max_steps"),
        ({"ignore_data_skip": True}, "ignore_data_skip=True with streamed corpora"),
        (
            {"strategy": "mixing-law"},
            "Strategy 'mixing-law' plans each step's mix from the examples every process drew",
        ),
        ({"strategy": "multidds-s"}, "Strategy 'multidds-s' measures on random batches of each training corpus"),
    ],
)
def test_what_a_stream_cannot_give_is_refused_before_training(tmp_path, tokenizer, corpora, settings, message):
    args = UATConfig(
        output_dir=str(tmp_path),
        report_to=[],
        use_cpu=True,
        max_tokens=300,
        update_every=2,
        **{"strategy": "multiuat", "max_steps": 4, **settings},
    )
    with pytest.raises(ValueError, match=message):
        UATTrainer(
            build_model("tiny", tokenizer),
            args,
            train_corpora=streams(tokenizer),
            processing_class=tokenizer,
            dev_corpora={n: corpora["dev"][n] for n in NAMES},
        )


def test_p_is_a_share_of_examples_drawn_from_the_streams(tmp_path, tokenizer, corpora):
    """A static prior over streams: the examples trained on follow p, batches respect the token budget."""
    trainer, history = run(
        corpora,
        tokenizer,
        tmp_path / "fixed",
        strategy="fixed",
        max_steps=60,
        corpus_probabilities={"bible": 0.25, "software": 0.75},
        save_steps=1000,
    )
    assert history[0]["probabilities"] == {"bible": 0.25, "software": 0.75}
    bible_ids = {tuple(e["input_ids"]) for e in streams(tokenizer)["bible"]}
    counts = np.zeros(2)
    for batch in trainer.trained_batches:
        assert len(batch) * len(batch[0]) <= 300  # padded tokens within max_tokens
        pad = tokenizer.pad_token_id
        rows = [tuple(t for t in row if t != pad) for row in batch]
        counts[0 if rows[0] in bible_ids else 1] += len(rows)
    share = counts[0] / counts.sum()
    assert 0.1 < share < 0.4, share  # 0.25 of the examples (60 batches of a random draw)


def test_batches_drawn_ahead_of_a_save_keep_the_mix_they_were_drawn_with(tokenizer):
    """The DataLoader draws ahead of training: positions drawn before a save but trained after it must come back from
    a resume with the p they were drawn with, not the p of the checkpoint (an update may fall in between)."""
    names = list(NAMES)
    sampler = StreamBatchSampler(
        streams(tokenizer), CorpusDistribution(names, [0.5, 0.5]), max_tokens=300, buffer_examples=16, seed=3
    )
    uninterrupted = iter(sampler)
    before = [next(uninterrupted) for _ in range(8)]
    sampler.steps_done = 4  # training reached position 4; 4-7 were drawn ahead with p = (0.5, 0.5)
    state = json.loads(json.dumps(sampler.state_dict()))
    sampler.distribution.set_probabilities([1.0, 0.0])  # an update after the save: bible only from now on
    after = [next(uninterrupted) for _ in range(12)]
    software = {tuple(e["input_ids"]) for e in streams(tokenizer)["software"]}
    assert any(tuple(b[0]["input_ids"]) in software for b in before[4:])  # the drawn-ahead mix had software in it
    assert not any(tuple(b[0]["input_ids"]) in software for b in after)

    resumed = StreamBatchSampler(
        streams(tokenizer), CorpusDistribution(names, [1.0, 0.0]), max_tokens=300, buffer_examples=16, seed=3
    )
    resumed.load_state_dict(state)
    replay = iter(resumed)
    assert [next(replay) for _ in range(4)] == [[]] * 4  # the trained positions, passed unread for the Trainer to skip
    assert [next(replay) for _ in range(16)] == before[4:] + after


def test_resume_of_streamed_corpora_continues_exactly(tmp_path, tokenizer, corpora):
    full, full_history = run(corpora, tokenizer, tmp_path / "full")
    partial = tmp_path / "partial"
    shutil.copytree(tmp_path / "full" / "checkpoint-5", partial / "checkpoint-5")
    shutil.copy(tmp_path / "full" / HISTORY_FILE, partial / HISTORY_FILE)
    saved = json.loads((partial / "checkpoint-5" / STREAM_STATE_FILE.format(rank=0)).read_text())
    assert saved["position"] == 5 and saved["drawn_ahead"]  # the DataLoader had drawn past step 5
    assert any(s["fills"] > 1 for s in saved["streams"].values())  # a buffer refilled before the save
    assert (partial / "checkpoint-5" / BALANCING_STATE_FILE).is_file()

    resumed, resumed_history = run(corpora, tokenizer, partial, resume=True)

    assert resumed.trained_batches == full.trained_batches[5:]
    assert [h["step"] for h in full_history] == [3, 6, 9]
    for a, b in zip(full_history, resumed_history, strict=True):
        assert (a["step"], a["probabilities"], a["multiuat"]["rewards"]) == (
            b["step"],
            b["probabilities"],
            b["multiuat"]["rewards"],
        )
    assert resumed.corpus_distribution.state_dict() == full.corpus_distribution.state_dict()
    for (name, p), q in zip(full.model.named_parameters(), resumed.model.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=0, msg=name)


@pytest.mark.distributed
def test_two_processes_draw_the_same_corpora_from_their_own_shards_and_resume_exactly(tmp_path):
    """2 processes over streams: p and the corpus of every batch agree on both ranks, each rank trains on other
    examples (its shard), and a run resumed from its step-5 checkpoint (a buffer half used, batches drawn ahead)
    retraces the uninterrupted one: same batches, same p, same final weights on both ranks."""
    script = HERE / "distributed" / "stream_run.py"
    launch_two_ranks(script, tmp_path / "full", "9", "5")
    for r in (0, 1):
        saved = json.loads((tmp_path / "full" / "run" / "checkpoint-5" / STREAM_STATE_FILE.format(rank=r)).read_text())
        assert saved["position"] == 10 and saved["drawn_ahead"] and saved["process_index"] == r
    shutil.copytree(tmp_path / "full" / "run" / "checkpoint-5", tmp_path / "resumed" / "run" / "checkpoint-5")
    shutil.copy(tmp_path / "full" / "run" / HISTORY_FILE, tmp_path / "resumed" / "run")
    launch_two_ranks(script, tmp_path / "resumed", "9", "5", "resume")
    full = [json_lines(tmp_path / "full" / f"rank{r}.jsonl") for r in (0, 1)]
    resumed = [json_lines(tmp_path / "resumed" / f"rank{r}.jsonl") for r in (0, 1)]
    for a, b in zip(*full, strict=True):
        assert a["p"] == b["p"] and a["batches"] != b["batches"]  # the same p, other examples
    drawn = [json.loads((tmp_path / "full" / f"drawn{r}").read_text()) for r in (0, 1)]
    common = min(map(len, drawn))
    assert common >= 18 and drawn[0][:common] == drawn[1][:common]  # the same corpus sequence on both ranks
    assert set(drawn[0]) == set(NAMES)
    assert full[0][0]["p"] != full[0][-1]["p"]  # the updates moved p
    for r in (0, 1):
        assert [s["step"] for s in resumed[r]] == [6, 7, 8, 9]
        assert resumed[r] == full[r][5:]
        assert (tmp_path / "full" / f"weights{r}").read_text() == (tmp_path / "resumed" / f"weights{r}").read_text()
    without = [
        {k: v for k, v in h.items() if k != "seconds"} for h in json_lines(tmp_path / "full" / "run" / HISTORY_FILE)
    ]
    assert [h["step"] for h in without] == [2, 4, 6, 8]
    assert [
        {k: v for k, v in h.items() if k != "seconds"} for h in json_lines(tmp_path / "resumed" / "run" / HISTORY_FILE)
    ] == without


def test_uat_train_streams_the_bundled_corpora_with_multiuat(tmp_path, capsys):
    """uat-train with streaming: true: the bundled training files are read as streams (dev and test as usual)."""
    from test_cli import TINY

    from uat_hf.cli import train as cli

    out = tmp_path / "out"
    recipe = {**TINY, "streaming": True, "dedupe": False, "max_steps": 3, "output_dir": str(out)}
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    assert cli.main(["--config", str(tmp_path / "recipe.yaml")]) == 0
    printed = capsys.readouterr().err  # uat-hf's progress messages
    assert "bible: streaming its training pairs (80 pairs)" in printed and "~80 streamed train" in printed
    assert "preparation cache not used: streamed corpora" in printed
    # what the tokenizer was trained on is what was read of the streams: their first pairs, not a total
    assert re.search(r"tokenizer on \d+ training pairs: the first \d+ of each streamed corpus \(bible, dictionary\)",
                     printed), printed
    results = json.loads((out / "eval_results.json").read_text())
    assert {"eval_bible_bleu", "eval_dictionary_bleu", "eval_software_ood_bleu"} <= set(results)
    assert [h["step"] for h in json_lines(out / HISTORY_FILE)] == [1, 2, 3]  # MultiUAT updated p every step


def test_uat_train_streams_a_local_hub_layout_with_a_static_prior_from_parquet_row_counts(tmp_path, capsys):
    """A corpus given as a dataset directory (the Hub layout, two parquet shards) streams like a Hub dataset with
    streaming=True; the proportional prior comes from the parquet row counts and the other corpus's line count."""
    from test_cli import TINY

    from uat_hf.cli import train as cli
    from uat_hf.data.corpora import load_corpus_split

    bible = next(s for s in multidomain_specs(None) if s.name == "bible")
    folder = tmp_path / "bible_hub" / "data"
    folder.mkdir(parents=True)
    train = load_corpus_split(bible, "train").select(range(300))
    train.select(range(120)).to_parquet(str(folder / "train-00000-of-00002.parquet"))
    train.select(range(120, 300)).to_parquet(str(folder / "train-00001-of-00002.parquet"))
    for split, name in (("dev", "validation"), ("test", "test")):
        load_corpus_split(bible, split).select(range(20)).to_parquet(str(folder / f"{name}-00000-of-00001.parquet"))
    dictionary = next(s for s in multidomain_specs(None) if s.name == "dictionary")
    specs = [
        {"name": "bible", "source_lang": "en", "target_lang": "de", "path": str(folder.parent)},
        {
            "name": "dictionary",
            "source_lang": "en",
            "target_lang": "de",
            "train": dictionary.train,
            "dev": dictionary.dev,
            "test": dictionary.test,
        },
    ]
    recipe = {k: v for k, v in TINY.items() if k not in ("corpus_dir", "direction", "corpora", "max_train_examples")}
    recipe.update(
        corpus_specs=specs,
        strategy="proportional",
        streaming=True,
        dedupe=False,
        max_steps=2,
        output_dir=str(tmp_path / "out"),
    )
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    assert cli.main(["--config", str(tmp_path / "recipe.yaml")]) == 0
    assert "bible: streaming its training pairs (300 pairs)" in capsys.readouterr().err
    (record,) = json_lines(tmp_path / "out" / HISTORY_FILE)
    assert record["probabilities"] == pytest.approx({"bible": 300 / 5300, "dictionary": 5000 / 5300})


def test_uat_train_refuses_a_whole_corpus_dedupe_of_a_stream_naming_the_corpus(tmp_path, capsys):
    from test_cli import TINY

    from uat_hf.cli import train as cli

    recipe = {**TINY, "streaming": True, "output_dir": str(tmp_path / "out")}  # dedupe: true, the default
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    assert cli.main(["--config", str(tmp_path / "recipe.yaml")]) == 2
    assert "Corpus 'bible' is streamed (streaming: true), but dedupe: true" in capsys.readouterr().err


def test_streamed_corpora_are_checked_on_their_first_pairs_which_training_skips(tmp_path, tokenizer, corpora):
    """A stream has no random access: the corpus-health checks hold out its first pairs (capped by
    corpus_health_holdout of its size), measure them at every check, and training starts after them; the prior
    still counts the stream's whole size."""
    from uat_hf.evaluation.corpus_health import stream_head
    from uat_hf.training.health_callback import CorpusHealthCallback

    settings = dict(strategy="proportional", max_steps=30, save_steps=1000, corpus_health_checks=2,
                    corpus_health_holdout=0.2, corpus_health_tokens=1500)
    trainer, history = run(corpora, tokenizer, tmp_path / "checked", **settings)
    health = next(c for c in trainer.callback_handler.callbacks if isinstance(c, CorpusHealthCallback))
    given = streams(tokenizer)
    # a sample for each of the 2 checks, at most 0.2 of the stream
    expected = {n: min(len(stream_head(given[n], 2 * 1500)), int(0.2 * streamed_size(given[n]))) for n in NAMES}
    assert health.summary()["held_out_pairs"] == expected and min(expected.values()) >= 16, expected
    checked = [e["step"] for e in trainer.state.log_history if "health/bible_source_use" in e]
    assert checked == [15, 30]
    pad = tokenizer.pad_token_id
    trained = {tuple(t for t in row if t != pad) for batch in trainer.trained_batches for row in batch}
    for name in NAMES:
        examples = [tuple(e["input_ids"]) for e in given[name]]
        head, rest = set(examples[:expected[name]]), set(examples[expected[name]:])
        assert not (head - rest) & trained  # no held-out pair is trained on ...
        assert examples[expected[name]] in trained  # ... training starts right after them
    sizes = {n: streamed_size(given[n]) for n in NAMES}
    assert history[0]["probabilities"] == pytest.approx({n: s / sum(sizes.values()) for n, s in sizes.items()})


def test_a_map_style_corpus_beside_a_stream_keeps_its_whole_size_in_the_prior(tmp_path, tokenizer, corpora):
    """The checks hold pairs out of a map-style corpus in a streamed run too; the prior still counts it whole."""
    from uat_hf.training.health_callback import CorpusHealthCallback

    software = corpora["train"]["software"]
    args = UATConfig(output_dir=str(tmp_path), strategy="proportional", max_steps=2, max_tokens=300, report_to=[],
                     use_cpu=True, seed=7, disable_tqdm=True, save_strategy="no", stream_buffer_examples=16,
                     corpus_health_checks=2, corpus_health_holdout=0.2, corpus_health_tokens=1500)
    trainer = UATTrainer(build_model("tiny", tokenizer), args, processing_class=tokenizer,
                         train_corpora={"bible": streams(tokenizer, names=("bible",))["bible"], "software": software},
                         dev_corpora={n: corpora["dev"][n] for n in NAMES})
    trainer.train()
    health = next(c for c in trainer.callback_handler.callbacks if isinstance(c, CorpusHealthCallback))
    assert health.summary()["held_out_pairs"]["software"] >= 16  # pairs held out of the map-style corpus ...
    sizes = {"bible": streamed_size(streams(tokenizer, names=("bible",))["bible"]), "software": len(software)}
    history = [json.loads(line) for line in (tmp_path / HISTORY_FILE).read_text().splitlines()]
    assert history[0]["probabilities"] == pytest.approx({n: s / sum(sizes.values()) for n, s in sizes.items()})
