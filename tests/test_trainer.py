"""UATTrainer end to end on real data, a real tokenizer and a tiny real Marian model."""

from __future__ import annotations

import json
import pickle
import shutil

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader
from transformers import (
    DataCollatorForSeq2Seq,
    EarlyStoppingCallback,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
    TrainerCallback,
)

from conftest import corpus_of
from uat_hf.evaluation.corpus_evaluation import CorpusEvaluation
from uat_hf.evaluation.metrics import detokenize, translation_scores
from uat_hf.models.presets import build_model
from uat_hf.training.balancing import attach_balancing
from uat_hf.training.uat_config import UATConfig
from uat_hf.training.uat_trainer import SIGNATURES_FILE, UATTrainer
from uat_hf.utils.checkpoints import BALANCING_STATE_FILE, HISTORY_FILE


def make_args(tmp_path, **overrides) -> UATConfig:
    settings = dict(
        output_dir=str(tmp_path / "out"), max_steps=6, max_tokens=400, learning_rate=3e-3, report_to=[],
        logging_steps=3, save_strategy="no", generation_max_length=16, per_device_eval_batch_size=12,
        use_cpu=True, seed=0, disable_tqdm=True,
    )
    settings.update(overrides)
    return UATConfig(**settings)


def test_train_then_evaluate_gives_per_corpus_metric_keys(tmp_path, corpora, tokenizer, tiny_model):
    trainer = UATTrainer(
        tiny_model, make_args(tmp_path), train_corpora=corpora["train"], dev_corpora=corpora["dev"],
        eval_corpora=corpora["test"], processing_class=tokenizer,
    )
    result = trainer.train()
    assert result.global_step == 6 and "epoch" in result.metrics  # as a stock trainer's
    metrics = trainer.evaluate()
    for name in corpora["test"]:
        assert 0.0 <= metrics[f"eval_{name}_bleu"] <= 100.0
        assert 0.0 < metrics[f"eval_{name}_chrf"] <= 100.0
    expected_mean = np.mean([metrics[f"eval_{n}_bleu"] for n in corpora["test"]])
    assert metrics["eval_mean_bleu"] == pytest.approx(expected_mean)
    assert "eval_mean_chrf" in metrics
    signatures = json.loads((tmp_path / "out" / SIGNATURES_FILE).read_text())
    assert "tok:13a" in signatures["bleu"] and "nc:6" in signatures["chrf"]


def test_training_batches_follow_the_strategy(tmp_path, corpora, tokenizer, tiny_model):
    """Uniform sampling over-samples the small corpus relative to proportional."""
    shares = {}
    for strategy in ("proportional", "uniform"):
        train = dict(corpora["train"])
        train["dictionary"] = train["dictionary"].select(range(40))
        trainer = UATTrainer(
            tiny_model, make_args(tmp_path, strategy=strategy), train_corpora=train, processing_class=tokenizer,
        )
        sampler = trainer.corpus_sampler
        drawn = [corpus_of(sampler, batch[0]) for batch in sampler]
        shares[strategy] = drawn.count("dictionary") / len(drawn)
        np.testing.assert_allclose(
            sampler.probabilities.sum(), 1.0
        )
    assert shares["uniform"] > 2 * shares["proportional"]


def test_evaluation_references_are_raw_text(tmp_path, corpora, tokenizer, tiny_model):
    """Scores compare detokenized hypotheses with the raw target text: the detokenized labels of untruncated
    rows (what a perfect model would output, padded with -100 as the Trainer pads them) score 100 BLEU."""
    dataset = corpora["test"]["bible"].filter(lambda row: len(row["labels"]) < 48)
    assert len(dataset) > 5
    trainer = UATTrainer(tiny_model, make_args(tmp_path, generation_num_beams=1, generation_max_length=4),
                         eval_corpora={"bible": dataset}, processing_class=tokenizer)
    translation = trainer.translate()["bible"]
    assert translation.references == list(dataset["target_text"])
    labels = np.full((len(dataset), 64), -100)
    for i, ids in enumerate(dataset["labels"]):
        labels[i, : len(ids)] = ids
    perfect, _ = translation_scores(detokenize(tokenizer, labels), translation.references)
    assert perfect["bleu"] == pytest.approx(100.0)
    assert translation.output.metrics["test_bible_bleu"] < 100.0  # the untrained model's own outputs


def test_an_evaluation_only_trainer_translates_but_refuses_to_train(tmp_path, corpora, tokenizer, tiny_model):
    """Without train_corpora the trainer is for evaluation (as a Trainer without train_dataset); a dataset without
    references is translated without scores, in its own row order."""
    dataset = corpora["test"]["bible"].select(range(6))
    trainer = UATTrainer(tiny_model, make_args(tmp_path, generation_num_beams=1, generation_max_length=6),
                         eval_corpora={"bible": dataset}, processing_class=tokenizer)
    with pytest.raises(ValueError, match="without train_corpora, for evaluation only"):
        trainer.train()
    scored = trainer.predict(dataset)
    unscored = trainer.predict(dataset.remove_columns(["labels", "target_text"]))
    assert "test_bleu" in scored.metrics and "test_bleu" not in unscored.metrics
    assert detokenize(tokenizer, unscored.predictions) == trainer.translate("bible")["bible"].hypotheses


def test_evaluation_decodes_longest_first_and_scores_against_the_right_references(tmp_path, corpora, tokenizer,
                                                                                  tiny_model):
    """Generation batches come longest source first (less padding and waiting), and the scores are those of
    the translations in file order against their own references."""
    dataset = corpora["test"]["bible"]
    collator = DataCollatorForSeq2Seq(tokenizer, model=tiny_model, label_pad_token_id=-100)
    source_lengths = []

    def recording_collator(rows):
        source_lengths.extend(len(row["input_ids"]) for row in rows)
        return collator(rows)

    trainer = UATTrainer(
        tiny_model, make_args(tmp_path, per_device_eval_batch_size=5, generation_num_beams=1),
        train_corpora=corpora["train"],
        eval_corpora={"bible": dataset}, data_collator=recording_collator, processing_class=tokenizer,
    )
    metrics = trainer.evaluate()
    assert len(source_lengths) == len(dataset) and len(set(source_lengths)) > 1
    assert source_lengths == sorted(source_lengths, reverse=True)

    tiny_model.eval()
    hypotheses = []
    for start in range(0, len(dataset), 5):
        batch = collator([{"input_ids": ids} for ids in dataset["input_ids"][start : start + 5]])
        output = tiny_model.generate(**batch, num_beams=1, max_length=16)
        hypotheses += [h.strip() for h in tokenizer.batch_decode(output, skip_special_tokens=True)]
    expected, _ = translation_scores(hypotheses, list(dataset["target_text"]))
    assert metrics["eval_bible_bleu"] == pytest.approx(expected["bleu"])
    assert metrics["eval_bible_chrf"] == pytest.approx(expected["chrf"])


def test_bad_construction_is_rejected(tmp_path, corpora, tokenizer, tiny_model):
    with pytest.raises(TypeError, match="got both train_dataset and train_corpora, which are the same slot"):
        UATTrainer(tiny_model, make_args(tmp_path), train_corpora=corpora["train"],
                   train_dataset=corpora["train"], processing_class=tokenizer)
    with pytest.raises(TypeError, match=r"train_dataset must be a dict of named corpora, \{name: tokenized Dataset, "
                                        r"\.\.\.\}, got Dataset"):
        UATTrainer(tiny_model, make_args(tmp_path), train_dataset=corpora["train"]["bible"],
                   processing_class=tokenizer)
    with pytest.raises(ValueError, match="'bible' is empty"):
        UATTrainer(tiny_model, make_args(tmp_path), train_corpora={"bible": corpora["train"]["bible"].select([])},
                   processing_class=tokenizer)
    with pytest.raises(ValueError, match="Unknown strategy 'greedy'"):
        make_args(tmp_path, strategy="greedy")
    with pytest.raises(ValueError, match="Unknown measure"):
        make_args(tmp_path, measure="entropy")


def test_attach_balancing_drives_a_stock_seq2seq_trainer(tmp_path, corpora, tokenizer, tiny_model):
    """Balancing on an unmodified Seq2SeqTrainer takes three lines: args, trainer, attach_balancing. Its numbers
    reach the loggers (log_history), its state the checkpoints, and a resumed stock run continues exactly."""
    class Logger(TrainerCallback):  # stands for a reporting integration (TensorBoard, W&B ...) registered at init
        def __init__(self):
            self.entries = []

        def on_log(self, args, state, control, logs=None, **kwargs):
            self.entries.append((state.global_step, dict(logs)))

    logger = Logger()

    def run(output, max_steps, resume=None):
        torch.manual_seed(0)
        model = build_model("tiny", tokenizer)
        args = UATConfig(output_dir=str(output), strategy="multiuat", measure="exptp", mc_samples=2, update_every=2,
                         max_steps=max_steps, max_tokens=400, logging_steps=1, save_steps=2, report_to=[],
                         use_cpu=True, disable_tqdm=True, seed=3)
        trainer = Seq2SeqTrainer(model=model, args=args, processing_class=tokenizer,
                                 data_collator=DataCollatorForSeq2Seq(tokenizer, model=model), callbacks=[logger])
        balancing = attach_balancing(trainer, corpora["train"], corpora["dev"])
        trainer.train(resume_from_checkpoint=resume)
        return trainer, balancing

    trainer, balancing = run(tmp_path / "stock", 6)
    history = [json.loads(line) for line in (tmp_path / "stock" / HISTORY_FILE).read_text().splitlines()]
    assert [h["step"] for h in history] == [2, 4, 6]
    assert set(history[0]["probabilities"]) == set(corpora["train"])
    logged = {step: logs for step, logs in logger.entries if "loss" in logs}
    assert logged[2]["balance/p_bible"] == history[0]["probabilities"]["bible"]
    assert "balance/p_bible" not in logged[3]
    assert (tmp_path / "stock" / "checkpoint-4" / BALANCING_STATE_FILE).is_file()
    # ... and the Trainer's own record of the logs, which trainer_state.json keeps, as under UATTrainer
    assert_balance_logged(trainer.state.log_history, history)
    saved = json.loads((tmp_path / "stock" / "checkpoint-4" / "trainer_state.json").read_text())
    assert_balance_logged(saved["log_history"], history[:2])

    shutil.rmtree(tmp_path / "stock" / "checkpoint-6")
    resumed, resumed_balancing = run(tmp_path / "stock", 6, resume=str(tmp_path / "stock" / "checkpoint-4"))
    assert (resumed_balancing.distribution.state_dict()["probabilities"]
            == balancing.distribution.state_dict()["probabilities"])
    # The history file held the step-6 record of the first run; the resume cut it and the run wrote it again.
    again = [json.loads(line) for line in (tmp_path / "stock" / HISTORY_FILE).read_text().splitlines()]
    assert [{k: v for k, v in h.items() if k != "seconds"} for h in again] == [
        {k: v for k, v in h.items() if k != "seconds"} for h in history]
    for p, q in zip(trainer.model.parameters(), resumed.model.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=0)

    with pytest.raises(TypeError, match="attach_balancing needs the balancing settings as a UATConfig"):
        stock_args = Seq2SeqTrainingArguments(str(tmp_path / "x"), report_to=[])
        attach_balancing(Seq2SeqTrainer(model=tiny_model, args=stock_args, processing_class=tokenizer),
                         corpora["train"])


def assert_balance_logged(log_history, history):
    """Each update's p and rewards are in the training log entry of its step, and only there."""
    training = {entry["step"]: entry for entry in log_history if "loss" in entry}
    for record in history:
        for name, p in record["probabilities"].items():
            assert training[record["step"]][f"balance/p_{name}"] == p
            assert training[record["step"]][f"balance/reward_{name}"] == record["multiuat"]["rewards"][name]
    updated = {record["step"] for record in history}
    assert all(("balance/seconds" in entry) == (step in updated) for step, entry in training.items())


def test_uat_trainer_logs_the_balance_numbers_into_log_history_and_trainer_state(tmp_path, corpora, tokenizer,
                                                                                   tiny_model):
    args = make_args(tmp_path, strategy="multiuat", measure="exptp", mc_samples=2, update_every=2, max_steps=4,
                     logging_steps=1, save_strategy="steps", save_steps=4)
    trainer = UATTrainer(tiny_model, args, train_corpora=corpora["train"], dev_corpora=corpora["dev"],
                         processing_class=tokenizer)
    trainer.train()
    history = [json.loads(line) for line in (tmp_path / "out" / HISTORY_FILE).read_text().splitlines()]
    assert [h["step"] for h in history] == [2, 4]
    assert_balance_logged(trainer.state.log_history, history)
    saved = json.loads((tmp_path / "out" / "checkpoint-4" / "trainer_state.json").read_text())
    assert_balance_logged(saved["log_history"], history)


def test_a_stock_trainer_early_stops_on_the_mean_bleu_of_corpus_evaluation(tmp_path, corpora, tokenizer,
                                                                           tiny_model):
    """attach_balancing users get eval_mean_bleu too: CorpusEvaluation is one eval_dataset and a compute_metrics
    that splits the translations by corpus, so metric_for_best_model="mean_bleu" works on a stock trainer."""
    recorder = EvaluationRecorder()
    small = {name: ds.select(range(8)) for name, ds in corpora["dev"].items()}
    evaluation = CorpusEvaluation(small, tokenizer)
    args = make_args(
        tmp_path, max_steps=12, learning_rate=1e-12, eval_strategy="steps", eval_steps=2, save_strategy="steps",
        save_steps=2, metric_for_best_model="mean_bleu", greater_is_better=True, load_best_model_at_end=True,
        generation_num_beams=1, generation_max_length=8,
    )
    trainer = Seq2SeqTrainer(model=tiny_model, args=args, processing_class=tokenizer,
                             data_collator=DataCollatorForSeq2Seq(tokenizer, model=tiny_model),
                             eval_dataset=evaluation.dataset, compute_metrics=evaluation,
                             callbacks=[EarlyStoppingCallback(early_stopping_patience=1), recorder])
    attach_balancing(trainer, corpora["train"])
    assert trainer.train().global_step == 4  # evaluations at steps 2 (best) and 4 (no better: patience 1 used up)
    assert len(recorder.events) == 2
    for metrics in recorder.events:
        scores = {name: {"bleu": metrics[f"eval_{name}_bleu"]} for name in small}
        assert metrics["eval_mean_bleu"] == pytest.approx(np.mean([s["bleu"] for s in scores.values()]))
    # the same numbers as UATTrainer's per-corpus evaluation of the same model
    uat = UATTrainer(trainer.model, args, eval_corpora=small, processing_class=tokenizer)
    expected = uat.evaluate()
    for key in ("eval_mean_bleu", "eval_mean_chrf", *(f"eval_{name}_chrf" for name in small)):
        assert recorder.events[-1][key] == pytest.approx(expected[key])


class EvaluationRecorder(TrainerCallback):
    def __init__(self):
        self.events = []

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        self.events.append(dict(metrics))


def test_early_stopping_follows_the_macro_mean_bleu(tmp_path, corpora, tokenizer, tiny_model):
    """One evaluation of many corpora is one on_evaluate event holding every corpus and the means, so
    EarlyStoppingCallback sees eval_mean_bleu: a run whose mean BLEU cannot improve (learning rate 1e-12: updates
    far below the weights' float32 resolution; 0 is refused) stops
    after `patience` evaluations instead of running to max_steps."""
    recorder = EvaluationRecorder()
    args = make_args(
        tmp_path, max_steps=12, learning_rate=1e-12, eval_strategy="steps", eval_steps=2, save_strategy="steps",
        save_steps=2, metric_for_best_model="mean_bleu", greater_is_better=True, load_best_model_at_end=True,
        generation_num_beams=1, generation_max_length=8,
    )
    small = {name: ds.select(range(8)) for name, ds in corpora["dev"].items()}
    trainer = UATTrainer(tiny_model, args, train_corpora=corpora["train"], dev_corpora=small,
                         processing_class=tokenizer,
                         callbacks=[EarlyStoppingCallback(early_stopping_patience=1), recorder])
    result = trainer.train()
    assert result.global_step == 4  # evaluations at steps 2 (best) and 4 (no better: patience 1 used up)
    assert len(recorder.events) == 2
    for metrics in recorder.events:
        assert "eval_mean_bleu" in metrics and all(f"eval_{name}_bleu" in metrics for name in small)
    assert trainer.state.best_metric == recorder.events[0]["eval_mean_bleu"]


def test_predict_on_named_corpora_matches_predict_on_each(tmp_path, corpora, tokenizer, tiny_model):
    """predict() accepts what evaluate() accepts: a dict of corpora gives one PredictionOutput per corpus, in the
    corpus's own row order, with the same metrics as evaluate."""
    test = {name: ds.select(range(10)) for name, ds in list(corpora["test"].items())[:2]}
    args = make_args(tmp_path, generation_num_beams=1, generation_max_length=8)
    trainer = UATTrainer(tiny_model, args, train_corpora=corpora["train"], eval_corpora=test,
                         processing_class=tokenizer)
    outputs = trainer.predict(test)
    assert set(outputs) == set(test)
    metrics = trainer.evaluate()
    for name, dataset in test.items():
        alone = Seq2SeqTrainer.predict(trainer, dataset.remove_columns("target_text"))

        def decode(ids):
            return tokenizer.batch_decode(np.where(ids < 0, tokenizer.pad_token_id, ids), skip_special_tokens=True)

        assert decode(outputs[name].predictions) == decode(alone.predictions)
        assert outputs[name].metrics[f"test_{name}_bleu"] == pytest.approx(metrics[f"eval_{name}_bleu"])
    assert isinstance(trainer.predict(test[next(iter(test))]).metrics, dict)


def test_training_data_loads_in_spawned_worker_processes(tmp_path, corpora, tokenizer, tiny_model):
    """With dataloader_num_workers > 0 on macOS / Windows, workers start with ``spawn`` and receive the
    worker_init_fn pickled: it must not be a lambda."""
    args = make_args(tmp_path, dataloader_num_workers=1)
    small = {name: ds.select(range(20)) for name, ds in corpora["train"].items()}
    trainer = UATTrainer(tiny_model, args, train_corpora=small, processing_class=tokenizer)
    loader = trainer.get_train_dataloader()
    pickle.dumps(loader.worker_init_fn)
    spawned = DataLoader(
        loader.dataset, batch_sampler=trainer.corpus_sampler, collate_fn=DataCollatorForSeq2Seq(tokenizer),
        num_workers=1, worker_init_fn=loader.worker_init_fn, multiprocessing_context="spawn",
    )
    batches = [batch for _, batch in zip(range(2), spawned)]
    assert len(batches) == 2 and batches[0]["input_ids"].shape[0] > 0


def test_predictions_gathered_with_padding_come_back_in_row_order():
    """Several processes gather predictions padded with repeats at the end; they are cut before the rows of a
    length-sorted corpus are put back in order."""
    from transformers.trainer_utils import PredictionOutput

    from uat_hf.evaluation.corpus_evaluation import in_original_order

    order = [2, 0, 1]  # the corpus's rows as generated: longest source first
    generated = np.array([[20], [0], [10], [20]])  # row 2, row 0, row 1, then a repeat of row 2 from the gather
    restored = in_original_order(PredictionOutput(generated, None, {}), order)
    np.testing.assert_array_equal(restored.predictions, [[0], [10], [20]])


def test_a_new_run_into_an_old_output_dir_starts_its_own_history(tmp_path, corpora, tokenizer, tiny_model):
    args = make_args(tmp_path, strategy="multiuat", measure="exptp", mc_samples=2, update_every=2, max_steps=4)
    history = tmp_path / "out" / HISTORY_FILE
    history.parent.mkdir(parents=True)
    history.write_text('{"step": 1000, "probabilities": {}}\n')  # an earlier run's record
    UATTrainer(tiny_model, args, train_corpora=corpora["train"], dev_corpora=corpora["dev"],
               processing_class=tokenizer).train()
    assert [json.loads(line)["step"] for line in history.read_text().splitlines()] == [2, 4]
