"""A user's compute_metrics under UATTrainer: per corpus and averaged over corpora; a key the trainer fills itself is
refused when the trainer is built, not at the first evaluation hours into training."""

from __future__ import annotations

import numpy as np
import pytest
import sacrebleu

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


def test_a_compute_metrics_returning_bleu_is_refused_when_the_trainer_is_built(tmp_path, corpora, tokenizer,
                                                                               tiny_model, small_dev):
    """run_translation.py's compute_metrics returns "bleu", which UATTrainer computes per corpus itself: refused at
    construction (it used to pass, then fail at the first evaluation), with what to do."""
    with pytest.raises(ValueError, match=r"compute_metrics returned \['bleu'\], which UATTrainer fills itself .*"
                                         r"eval_bible_bleu.* run_translation\.py"):
        UATTrainer(tiny_model, make_args(tmp_path), train_corpora=corpora["train"], dev_corpora=small_dev,
                   processing_class=tokenizer, compute_metrics=run_translation_compute_metrics(tokenizer))
    # an error of compute_metrics itself also shows now, naming the probe
    def failing(prediction):
        raise KeyError("boom")

    with pytest.raises(ValueError, match=r"compute_metrics failed when UATTrainer tried it, before training, on 2 "
                                         r"rows of evaluation corpus 'bible'.*boom"):
        UATTrainer(tiny_model, make_args(tmp_path), eval_corpora=small_dev, processing_class=tokenizer,
                   compute_metrics=failing)


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

    trainer.compute_metrics = run_translation_compute_metrics(tokenizer)  # set after construction: refused at use
    with pytest.raises(ValueError, match=r"compute_metrics returned \['bleu'\]"):
        trainer.evaluate()
