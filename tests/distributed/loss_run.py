"""Run as ``python loss_run.py OUTDIR ACCUMULATION`` (one process) or under ``accelerate launch --num_processes 2``:
one optimizer step of a proportional training, without dropout, on the first two batches of the corpus sampler
(two processes: one batch each; one process: both, accumulated). Rank 0 writes the logged loss, the train
throughput and the reference: the mean of the two batches' losses computed by the model itself before training.
"""

from __future__ import annotations

import copy
import itertools
import json
import sys
from pathlib import Path

import torch
from run_setup import multidomain_data, seeded_model, short_run_config
from teardown import finish

from uat_hf.training.uat_trainer import UATTrainer


def main(outdir: str, accumulation: int) -> None:
    out = Path(outdir)
    tokenizer, data = multidomain_data(100, max_length=32, splits=("train",))
    model = seeded_model("tiny", tokenizer, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)
    args = short_run_config(out, strategy="proportional", max_steps=1, max_tokens=200, logging_steps=1,
                            gradient_accumulation_steps=accumulation)
    trainer = UATTrainer(model, args, train_corpora=data["train"], processing_class=tokenizer)
    batches = list(itertools.islice(iter(copy.deepcopy(trainer.corpus_sampler)), 2))
    with torch.no_grad():
        losses = [model(**trainer.data_collator([trainer.train_dataset[i] for i in batch])).loss.item()
                  for batch in batches]
    result = trainer.train()
    if trainer.accelerator.is_main_process:
        logged = next(entry["loss"] for entry in trainer.state.log_history if "loss" in entry)
        record = {"world": trainer.accelerator.num_processes, "logged": logged, "reference": sum(losses) / 2,
                  "examples": sum(len(b) for b in batches), "metrics": result.metrics}
        (out / "loss.json").write_text(json.dumps(record))
    finish(trainer.accelerator)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
