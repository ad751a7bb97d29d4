"""A stock Seq2SeqTrainer balanced with attach_balancing and scored by CorpusEvaluation, evaluated and asked for
predictions on a dict of corpora, as a Transformers user calls them."""

from __future__ import annotations

import pytest
from transformers import DataCollatorForSeq2Seq, Seq2SeqTrainer

from uat_hf.evaluation.corpus_evaluation import CorpusEvaluation
from uat_hf.evaluation.metrics import detokenize, translation_scores
from uat_hf.training.balancing import attach_balancing
from uat_hf.training.uat_config import UATConfig

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_evaluate_and_predict_take_a_dict_of_corpora(tmp_path, corpora, tokenizer, tiny_model):
    """The Trainer evaluates each dataset of a dict on its own, so CorpusEvaluation, sized for all corpora
    concatenated, refused ("Got 8 translations for the 16 rows"); a stock predict of a dict failed inside its
    DataLoader (KeyError: 0). Each corpus now gives eval_<name>_bleu / _chrf, the numbers of the one evaluation
    of the concatenation, and predict gives one PredictionOutput per corpus."""
    dev = {name: corpora["dev"][name].select(range(8)) for name in ("bible", "software")}
    evaluation = CorpusEvaluation(dev, tokenizer)
    args = UATConfig(output_dir=str(tmp_path / "out"), max_steps=2, max_tokens=400, report_to=[], use_cpu=True,
                     generation_max_length=8, generation_num_beams=1, per_device_eval_batch_size=8,
                     disable_tqdm=True, seed=0)
    trainer = Seq2SeqTrainer(model=tiny_model, args=args, processing_class=tokenizer,
                             data_collator=DataCollatorForSeq2Seq(tokenizer, model=tiny_model),
                             eval_dataset=evaluation.dataset, compute_metrics=evaluation)
    attach_balancing(trainer, corpora["train"])
    together = trainer.evaluate()

    each = trainer.evaluate(dev)
    for name in dev:
        for key in ("bleu", "chrf"):
            assert each[f"eval_{name}_{key}"] == pytest.approx(together[f"eval_{name}_{key}"])

    predictions = trainer.predict(dev)
    assert set(predictions) == set(dev)
    software = predictions["software"]
    assert len(software.predictions) == 8
    assert software.metrics["test_software_chrf"] == pytest.approx(together["eval_software_chrf"])
    # scored against the raw references of the corpus its rows come from
    expected, _ = translation_scores(detokenize(tokenizer, software.predictions), list(dev["software"]["target_text"]))
    assert software.metrics["test_software_chrf"] == pytest.approx(expected["chrf"])

    single = trainer.predict(dev["bible"])  # one dataset: the stock call, unchanged
    assert single.metrics["test_chrf"] == pytest.approx(together["eval_bible_chrf"])
    # rows of no corpus of the CorpusEvaluation: scored against their own decoded labels
    other = trainer.predict(corpora["dev"]["dictionary"].select(range(4)))
    expected, _ = translation_scores(detokenize(tokenizer, other.predictions), detokenize(tokenizer, other.label_ids))
    assert other.metrics["test_chrf"] == pytest.approx(expected["chrf"])
