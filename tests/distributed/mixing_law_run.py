"""Run under `accelerate launch --multi_gpu --num_processes 2 ...` on CPU: a short mixing-law training.

Each rank appends, after every optimizer step, its live probabilities (the probe mix inside a window), its
sampler state and the law's state to OUTDIR/rank<r>.jsonl, and counts the dev-loss forwards it ran, so the
test can check that the ranks agree and that the measurement was split rather than duplicated.

``OUTDIR MAX_STEPS SAVE_STEPS [resume]``: train MAX_STEPS steps saving every SAVE_STEPS (and resume from the last
checkpoint in OUTDIR/run); each rank then writes a digest of its final weights to OUTDIR/weights<r>.
"""

from __future__ import annotations

import hashlib
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

import uat_hf.strategies.mixing_law.dev_loss
from uat_hf.training.uat_trainer import UATTrainer


def main(outdir: str, max_steps: int = 10, save_steps: int | None = None, resume: bool = False) -> None:
    out = Path(outdir)
    tokenizer, data = multidomain_data(200, max_length=32, splits=("train", "dev"))
    dev = first_examples(data["dev"], 8)
    model = seeded_model("tiny", tokenizer)
    args = short_run_config(
        out, strategy="mixing-law", strategy_settings={"window_steps": 1, "sweeps": 1}, update_every=5,
        max_steps=max_steps, max_tokens=200, dev_batch_tokens=200, mix_corpora=True,
        **({"save_strategy": "steps", "save_steps": save_steps} if save_steps else {}),
    )
    trainer = UATTrainer(model, args, train_corpora=data["train"], dev_corpora=dev, processing_class=tokenizer)
    trainer.forwards = 0
    measure = uat_hf.strategies.mixing_law.dev_loss.dev_loss_sums

    def counting(model, batch, *rest):
        trainer.forwards += 1
        return measure(model, batch, *rest)

    uat_hf.strategies.mixing_law.dev_loss.dev_loss_sums = counting
    sub_batches = record_sub_batches(trainer)  # per measurement: sub-batches of each dev batch
    sampler = trainer.corpus_sampler
    trainer.add_callback(RecordSteps(out / f"rank{trainer.accelerator.process_index}.jsonl", lambda step: {
        "p": sampler.probabilities.tolist(), "sampler": sampler.state_dict(),
        "law": trainer.corpus_distribution.proposer.state_dict(), "forwards": trainer.forwards,
        "sub_batches": sub_batches}))
    trainer.train(resume_from_checkpoint=resume or None)
    weights = hashlib.sha256(b"".join(p.detach().cpu().numpy().tobytes() for p in trainer.model.parameters()))
    (out / f"weights{trainer.accelerator.process_index}").write_text(weights.hexdigest())
    write_done(out, trainer)
    finish(trainer.accelerator)


if __name__ == "__main__":
    main(sys.argv[1], *map(int, sys.argv[2:4]), resume=sys.argv[4:] == ["resume"])
