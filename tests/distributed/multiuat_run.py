"""Run under `accelerate launch --multi_gpu --num_processes 2 ...` on CPU: a short MultiUAT training.

Each rank appends, after every optimizer step, its live probabilities and its sampler state to
OUTDIR/rank<r>.jsonl, counts the MC-dropout passes it ran and records how many sub-batches each corpus's dev
batch had, so the test can check that the ranks agree and that the work was split rather than duplicated.
"""

from __future__ import annotations

import sys
from pathlib import Path

from run_setup import (
    RecordSteps,
    first_examples,
    multidomain_data,
    record_sub_batches,
    seeded_model,
    short_run_config,
    write_done,
)
from teardown import finish

from uat_hf.training.uat_trainer import UATTrainer


def main(outdir: str) -> None:
    out = Path(outdir)
    tokenizer, data = multidomain_data(200, max_length=32, splits=("train", "dev"))
    dev = first_examples(data["dev"], 8)
    dev["dictionary"] = data["dev"]["dictionary"].select([0])  # fewer dev examples than ranks
    model = seeded_model("tiny", tokenizer)
    args = short_run_config(
        out, strategy="multiuat", measure="enteos", mc_samples=3, update_every=2, scorer_lr=1e-2, scorer_steps=10,
        max_steps=6, max_tokens=200,
    )
    trainer = UATTrainer(model, args, train_corpora=data["train"], dev_corpora=dev, processing_class=tokenizer)
    trainer.passes_run = 0
    reward = trainer.balancing.reward
    measure_passes = reward._pass_sums

    def counting(model, batch, passes, replicate):
        trainer.passes_run += passes
        return measure_passes(model, batch, passes, replicate)

    reward._pass_sums = counting
    sub_batches = record_sub_batches(trainer)  # per update: sub-batches of each dev batch
    sampler = trainer.corpus_sampler
    trainer.add_callback(RecordSteps(out / f"rank{trainer.accelerator.process_index}.jsonl", lambda step: {
        "p": sampler.probabilities.tolist(), "sampler": sampler.state_dict(), "passes": trainer.passes_run,
        "sub_batches": sub_batches}))
    trainer.train()
    write_done(out, trainer)
    finish(trainer.accelerator)


if __name__ == "__main__":
    main(sys.argv[1])
