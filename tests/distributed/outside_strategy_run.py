"""Run under `accelerate launch --multi_gpu --num_processes 2 ...` on CPU: a short run of the outside strategy
tests/plugins/dev_loss_strategy.py, named by ``module:Class`` as ``uat-train --strategy`` would name it.

Each rank appends, after every optimizer step, its live probabilities and sampler state to OUTDIR/rank<r>.jsonl.
"""

from __future__ import annotations

import sys
from pathlib import Path

from run_setup import RecordSteps, first_examples, multidomain_data, seeded_model, short_run_config, write_done
from teardown import finish

from uat_hf.training.uat_trainer import UATTrainer


def main(outdir: str) -> None:
    out = Path(outdir)
    tokenizer, data = multidomain_data(200, max_length=32, splits=("train", "dev"))
    model = seeded_model("tiny", tokenizer)
    args = short_run_config(out, strategy="plugins.dev_loss_strategy:DevLossShare", update_every=2, max_steps=6,
                            max_tokens=200, dev_batch_tokens=200)
    trainer = UATTrainer(model, args, train_corpora=data["train"], dev_corpora=first_examples(data["dev"], 8),
                         processing_class=tokenizer)
    sampler = trainer.corpus_sampler
    trainer.add_callback(RecordSteps(out / f"rank{trainer.accelerator.process_index}.jsonl", lambda step: {
        "p": sampler.probabilities.tolist(), "sampler": sampler.state_dict(),
        "state": trainer.corpus_distribution.proposer.state_dict()}))
    trainer.train()
    write_done(out, trainer)
    finish(trainer.accelerator)


if __name__ == "__main__":
    main(sys.argv[1])
