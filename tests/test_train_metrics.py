"""What UATTrainer reports about training and evaluation: true throughput, and no metric silently lost."""

from __future__ import annotations

import copy
import itertools

import pytest

from uat_hf.training.uat_config import UATConfig
from uat_hf.training.uat_trainer import UATTrainer


def make_args(tmp_path, **overrides) -> UATConfig:
    settings = dict(output_dir=str(tmp_path / "out"), max_steps=4, max_tokens=400, report_to=[], logging_steps=2,
                    save_strategy="no", generation_max_length=8, per_device_eval_batch_size=12, use_cpu=True, seed=0,
                    disable_tqdm=True)
    settings.update(overrides)
    return UATConfig(**settings)


def test_throughput_counts_the_examples_and_tokens_trained_on(tmp_path, corpora, tokenizer, tiny_model):
    """Under max_tokens a batch holds far more than per_device_train_batch_size (2) examples: the Trainer's
    train_samples_per_second (4 steps x 2 over the runtime) was wrong; the trained examples and tokens count."""
    args = make_args(tmp_path, per_device_train_batch_size=2)
    trainer = UATTrainer(tiny_model, args, train_corpora=corpora["train"], processing_class=tokenizer)
    # The batches the 4 steps train on: a static strategy draws the same sequence from a copy of the sampler.
    batches = list(itertools.islice(iter(copy.deepcopy(trainer.corpus_sampler)), 4))
    rows = [trainer.train_dataset[i] for batch in batches for i in batch]
    examples = len(rows)
    tokens = sum(len(row["input_ids"]) + len(row["labels"]) for row in rows)
    assert examples > 2 * 4 * 2
    metrics = trainer.train().metrics
    runtime = metrics["train_runtime"]
    assert metrics["train_samples_per_second"] * runtime == pytest.approx(examples, rel=1e-2)
    assert metrics["train_tokens_per_second"] * runtime == pytest.approx(tokens, rel=1e-2)
    final = trainer.state.log_history[-1]
    assert final["train_samples_per_second"] == metrics["train_samples_per_second"]


def test_compute_metrics_keys_are_kept_and_a_clash_is_kept_apart(tmp_path, corpora, tokenizer, tiny_model):
    def user_metrics(prediction):
        return {"length": float(prediction.predictions.shape[1])}

    dev = {"bible": corpora["dev"]["bible"].select(range(6))}
    trainer = UATTrainer(tiny_model, make_args(tmp_path), dev_corpora=dev, processing_class=tokenizer,
                         compute_metrics=user_metrics)
    metrics = trainer.evaluate()
    assert {"eval_bible_length", "eval_bible_bleu", "eval_bible_chrf"} <= set(metrics)

    trainer.compute_metrics = lambda prediction: {"bleu": 99.0}  # the trainer's own key: kept beside it
    clashing = trainer.evaluate()
    assert clashing["eval_bible_user_bleu"] == 99.0 and clashing["eval_bible_bleu"] == metrics["eval_bible_bleu"]
