"""A user's compute_metrics under UATTrainer: per corpus and averaged over corpora, beside the trainer's own scores
(a key the trainer fills itself is kept apart, not refused); errors show when the trainer is built."""

from __future__ import annotations

import numpy as np
import pytest
import sacrebleu

from uat_hf.evaluation.metrics import translation_scores
from uat_hf.evaluation.user_metrics import kept_apart
from uat_hf.training.uat_config import UATConfig
from uat_hf.training.uat_trainer import UATTrainer

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def run_translation_compute_metrics(tokenizer, bleu_key: str = "bleu"):
    """compute_metrics of Transformers' examples/pytorch/translation/run_translation.py, as users copy it; only
    ``evaluate.load("sacrebleu")`` (a Hub download) is replaced by sacrebleu itself, which it wraps."""
    def postprocess_text(preds, labels):
        preds = [pred.strip() for pred in preds]
        labels = [[label.strip()] for label in labels]
        return preds, labels

    def compute_metrics(eval_preds):
        preds, labels = eval_preds
        if isinstance(preds, tuple):
            preds = preds[0]
        # Replace -100s used for padding as we can't decode them
        preds = np.where(preds != -100, preds, tokenizer.pad_token_id)
        decoded_preds = tokenizer.batch_decode(preds, skip_special_tokens=True)
        labels = np.where(labels != -100, labels, tokenizer.pad_token_id)
        decoded_labels = tokenizer.batch_decode(labels, skip_special_tokens=True)

        # Some simple post-processing
        decoded_preds, decoded_labels = postprocess_text(decoded_preds, decoded_labels)

        result = sacrebleu.corpus_bleu(decoded_preds, [list(refs) for refs in zip(*decoded_labels)])
        result = {bleu_key: result.score}

        prediction_lens = [np.count_nonzero(pred != tokenizer.pad_token_id) for pred in preds]
        result["gen_len"] = np.mean(prediction_lens)
        result = {k: round(v, 4) for k, v in result.items()}
        return result

    return compute_metrics


def make_args(tmp_path, **overrides) -> UATConfig:
    settings = dict(output_dir=str(tmp_path / "out"), max_steps=2, max_tokens=400, report_to=[], save_strategy="no",
                    generation_max_length=8, generation_num_beams=1, per_device_eval_batch_size=8, use_cpu=True,
                    disable_tqdm=True, seed=0)
    return UATConfig(**(settings | overrides))


@pytest.fixture
def small_dev(corpora):
    return {name: ds.select(range(6)) for name, ds in corpora["dev"].items()}


def test_an_error_of_compute_metrics_shows_when_the_trainer_is_built(tmp_path, tokenizer, tiny_model, small_dev):
    def failing(prediction):
        raise KeyError("boom")

    with pytest.raises(ValueError, match=r"compute_metrics failed when UATTrainer tried it, before training, on 2 "
                                         r"rows of evaluation corpus 'bible'.*boom"):
        UATTrainer(tiny_model, make_args(tmp_path), eval_corpora=small_dev, processing_class=tokenizer,
                   compute_metrics=failing)


def test_run_translations_compute_metrics_is_kept_beside_the_trainers_scores(tmp_path, tokenizer, tiny_model,
                                                                            small_dev, caplog):
    """run_translation.py's compute_metrics returns "bleu" (and "gen_len"), which UATTrainer scores itself per corpus:
    the user's keys are reported under user_bleu beside the trainer's, never refused, never overwritten."""
    with caplog.at_level("INFO", logger="uat_hf"):
        trainer = UATTrainer(tiny_model, make_args(tmp_path), eval_corpora=small_dev, processing_class=tokenizer,
                             compute_metrics=run_translation_compute_metrics(tokenizer))
    assert "yours is reported beside it as eval_bible_user_bleu" in caplog.text
    metrics = trainer.evaluate()
    for name in small_dev:
        hypotheses = trainer.translate(name)[name].hypotheses
        own, _ = translation_scores(hypotheses, list(small_dev[name]["target_text"]))
        assert metrics[f"eval_{name}_bleu"] == pytest.approx(own["bleu"])  # the trainer's sacreBLEU, untouched
        assert 0 < metrics[f"eval_{name}_gen_len"] <= 8 and f"eval_{name}_user_bleu" in metrics
    user_bleu = [metrics[f"eval_{n}_user_bleu"] for n in small_dev]
    assert metrics["eval_mean_user_bleu"] == pytest.approx(np.mean(user_bleu))
    assert metrics["eval_mean_gen_len"] == pytest.approx(np.mean([metrics[f"eval_{n}_gen_len"] for n in small_dev]))


def test_kept_apart_prefixes_only_the_clashing_keys():
    assert kept_apart({"bleu": 1, "gen_len": 2}, ("bleu", "chrf")) == {"user_bleu": 1, "gen_len": 2}
    assert kept_apart({"bleu": 1, "user_bleu": 2}, ("bleu",)) == {"user_user_bleu": 1, "user_bleu": 2}


def test_compute_metrics_runs_per_corpus_and_is_averaged_over_corpora(tmp_path, tokenizer, tiny_model, small_dev):
    compute_metrics = run_translation_compute_metrics(tokenizer, bleu_key="hf_bleu")
    trainer = UATTrainer(tiny_model, make_args(tmp_path), eval_corpora=small_dev, processing_class=tokenizer,
                         compute_metrics=compute_metrics)
    metrics = trainer.evaluate()
    for key in ("hf_bleu", "gen_len"):
        per_corpus = [metrics[f"eval_{name}_{key}"] for name in small_dev]
        assert metrics[f"eval_mean_{key}"] == pytest.approx(np.mean(per_corpus))
    assert 0 < metrics["eval_bible_gen_len"] <= 8
    assert {"eval_mean_bleu", "eval_mean_chrf", "eval_bible_bleu"} <= set(metrics)  # the trainer's own, as before
    # each corpus's own rows: the gen_len of one corpus evaluated alone is the one reported for it
    alone = trainer.evaluate({"software": small_dev["software"]})
    assert alone["eval_software_gen_len"] == metrics["eval_software_gen_len"]

    trainer.compute_metrics = run_translation_compute_metrics(tokenizer)  # set after construction: kept apart too
    later = trainer.evaluate()
    assert later["eval_software_user_bleu"] == metrics["eval_software_hf_bleu"]
    assert later["eval_software_bleu"] == metrics["eval_software_bleu"]


def test_corpus_metrics_adds_chrfpp_and_ter_per_corpus_and_as_means(tmp_path, tokenizer, tiny_model, small_dev):
    trainer = UATTrainer(tiny_model, make_args(tmp_path, corpus_metrics=["ter", "chrfpp"]), eval_corpora=small_dev,
                         processing_class=tokenizer)
    metrics = trainer.evaluate()
    for name in small_dev:
        own, _ = translation_scores(trainer.translate(name)[name].hypotheses, list(small_dev[name]["target_text"]),
                                    metrics=["chrfpp", "ter"])
        for key in ("bleu", "chrf", "chrfpp", "ter"):
            assert metrics[f"eval_{name}_{key}"] == pytest.approx(own[key])
    assert metrics["eval_mean_ter"] == pytest.approx(np.mean([metrics[f"eval_{n}_ter"] for n in small_dev]))
    assert "nw:2" in trainer.metric_signatures["chrfpp"] and "tok:tercom" in trainer.metric_signatures["ter"]
    with pytest.raises(ValueError, match=r"unknown metric 'comet'; choose from bleu, chrf, chrfpp, ter"):
        make_args(tmp_path, corpus_metrics=["comet"])


def test_corpus_evaluation_on_a_stock_trainer_adds_a_users_metrics_to_its_own(tmp_path, tokenizer, tiny_model,
                                                                                small_dev):
    """CorpusEvaluation used to replace a user's compute_metrics (run_translation's gen_len was lost): it now runs it
    on each corpus's rows beside its own scores, with the same keys as UATTrainer gives."""
    from transformers import DataCollatorForSeq2Seq, Seq2SeqTrainer

    from uat_hf.evaluation.corpus_evaluation import CorpusEvaluation

    evaluation = CorpusEvaluation(small_dev, tokenizer, metrics=["ter"],
                                  compute_metrics=run_translation_compute_metrics(tokenizer))
    args = make_args(tmp_path)
    collator = DataCollatorForSeq2Seq(tokenizer, model=tiny_model)
    stock = Seq2SeqTrainer(model=tiny_model, args=args, processing_class=tokenizer, eval_dataset=evaluation.dataset,
                           data_collator=collator, compute_metrics=evaluation)
    metrics = stock.evaluate(max_length=8, num_beams=1)
    uat = UATTrainer(tiny_model, make_args(tmp_path, corpus_metrics=["ter"]), eval_corpora=small_dev,
                     processing_class=tokenizer, compute_metrics=run_translation_compute_metrics(tokenizer)).evaluate()
    for name in small_dev:
        for key in ("bleu", "chrf", "ter", "user_bleu", "gen_len"):
            assert metrics[f"eval_{name}_{key}"] == pytest.approx(uat[f"eval_{name}_{key}"]), (name, key)
    for key in ("bleu", "ter", "user_bleu", "gen_len"):
        assert metrics[f"eval_mean_{key}"] == pytest.approx(uat[f"eval_mean_{key}"])


EXACT_MATCH = '''
import datasets
import evaluate


class ExactMatch(evaluate.Metric):
    def _info(self):
        text = datasets.Value("string")
        return evaluate.MetricInfo(description="hypotheses equal to their reference, %", citation="",
                                   inputs_description="",
                                   features=datasets.Features({"predictions": text, "references": text}))

    def _compute(self, predictions, references):
        return {"exact": 100.0 * sum(p == r for p, r in zip(predictions, references)) / len(references)}
'''


def test_a_local_evaluate_metric_scores_every_corpus_and_a_hub_name_is_refused(tmp_path, tokenizer, tiny_model,
                                                                              small_dev):
    metric = tmp_path / "exact_match"
    metric.mkdir()
    (metric / "exact_match.py").write_text(EXACT_MATCH, encoding="utf-8")
    trainer = UATTrainer(tiny_model, make_args(tmp_path, corpus_metrics=[str(metric)]), eval_corpora=small_dev,
                         processing_class=tokenizer)
    metrics = trainer.evaluate()
    exact = {}
    for name in small_dev:
        hypotheses = trainer.translate(name)[name].hypotheses
        references = list(small_dev[name]["target_text"])
        exact[name] = 100.0 * sum(h == r for h, r in zip(hypotheses, references)) / len(references)
        assert metrics[f"eval_{name}_exact"] == pytest.approx(exact[name])
    assert metrics["eval_mean_exact"] == pytest.approx(np.mean(list(exact.values())))
    assert trainer.metric_signatures[str(metric)] == f"evaluate:{metric}"
    with pytest.raises(ValueError, match=r"unknown metric 'google_bleu'.*path of a local `evaluate` metric"):
        make_args(tmp_path, corpus_metrics=["google_bleu"])
