"""run_translation.py, condensed, on named corpora, with the stock Seq2SeqTrainer: the corpora concatenated.

Kept line for line beside `run_translation.py` (its UATTrainer twin), so that `diff` shows what switching takes:
three lines (tests/test_examples.py checks it). Here the training mix is the corpora's sizes, fixed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import datasets
import numpy as np
import sacrebleu
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, DataCollatorForSeq2Seq, HfArgumentParser

from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments

BUNDLED = Path(__file__).resolve().parent.parent / "uat_hf" / "bundled" / "multidomain-en-de"


@dataclass
class ScriptArguments:
    model_name_or_path: str = field(metadata={"help": "A seq2seq model and its tokenizer (Hub id or folder)."})
    corpus_dir: str = field(default=str(BUNDLED), metadata={"help": "<corpus>.<split>.jsonl(.gz) files."})
    corpora: list[str] = field(default_factory=lambda: ["bible", "descriptions", "dictionary", "software"])
    source_lang: str = "en"
    target_lang: str = "de"
    max_source_length: int = 128
    max_target_length: int = 128
    max_train_samples: int | None = None
    max_eval_samples: int | None = None


def main() -> dict[str, float]:
    parser = HfArgumentParser((ScriptArguments, Seq2SeqTrainingArguments))
    script_args, args = parser.parse_args_into_dataclasses()
    tokenizer = AutoTokenizer.from_pretrained(script_args.model_name_or_path)
    model = AutoModelForSeq2SeqLM.from_pretrained(script_args.model_name_or_path)

    def preprocess_function(examples):
        inputs = [ex[script_args.source_lang] for ex in examples["translation"]]
        targets = [ex[script_args.target_lang] for ex in examples["translation"]]
        return tokenizer(inputs, text_target=targets, max_length=script_args.max_source_length, truncation=True)

    def corpus(name: str, split: str, limit: int | None):
        files = sorted(Path(script_args.corpus_dir).glob(f"{name}.{split}.jsonl*"))
        dataset = datasets.load_dataset("json", data_files=[str(f) for f in files], split="train")
        dataset = dataset.select(range(min(limit, len(dataset)))) if limit else dataset
        return dataset.map(preprocess_function, batched=True, remove_columns=dataset.column_names)

    train = {name: corpus(name, "train", script_args.max_train_samples) for name in script_args.corpora}
    dev = {name: corpus(name, "dev", script_args.max_eval_samples) for name in script_args.corpora}

    def compute_metrics(eval_preds):  # run_translation's, with sacrebleu itself (evaluate.load fetches a script)
        preds, labels = eval_preds
        preds = np.where(preds != -100, preds, tokenizer.pad_token_id)
        decoded_preds = [pred.strip() for pred in tokenizer.batch_decode(preds, skip_special_tokens=True)]
        labels = np.where(labels != -100, labels, tokenizer.pad_token_id)
        decoded_labels = [label.strip() for label in tokenizer.batch_decode(labels, skip_special_tokens=True)]
        result = {"bleu": sacrebleu.corpus_bleu(decoded_preds, [decoded_labels]).score}
        result["gen_len"] = np.mean([np.count_nonzero(pred != tokenizer.pad_token_id) for pred in preds])
        return {k: round(v, 4) for k, v in result.items()}

    collator = DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100)
    common = dict(eval_dataset=dev, processing_class=tokenizer, data_collator=collator,
                  compute_metrics=compute_metrics)
    trainer = Seq2SeqTrainer(model, args, train_dataset=datasets.concatenate_datasets([*train.values()]), **common)
    trainer.train()
    trainer.save_model()
    metrics = trainer.evaluate(max_length=script_args.max_target_length)
    trainer.log_metrics("eval", metrics)
    trainer.save_metrics("eval", metrics)
    return metrics


if __name__ == "__main__":
    main()
