"""Run under `accelerate launch --multi_gpu --num_processes 2 ...` on CPU: a short MultiUAT training of a tiny
decoder-only model (causal-tiny preset) on prompt + completion corpora.

Each rank appends, after every optimizer step, its live probabilities and the rewards of the last update to
OUTDIR/rank<r>.jsonl, so the test can check that the ranks agree.
"""

from __future__ import annotations

import sys
from pathlib import Path

from run_setup import RecordSteps, first_examples, multidomain_data, seeded_model, short_run_config, write_done
from teardown import finish

from uat_hf.data.causal_data import CausalPrompt
from uat_hf.training.uat_trainer import UATTrainer


def main(outdir: str) -> None:
    out = Path(outdir)
    tokenizer, data = multidomain_data(120, max_length=24, splits=("train", "dev"), prompt=CausalPrompt())
    dev = first_examples(data["dev"], 6)
    model = seeded_model("causal-tiny", tokenizer)
    args = short_run_config(
        out, strategy="multiuat", measure="enteos", mc_samples=3, update_every=2, scorer_lr=1e-1, scorer_steps=10,
        max_steps=6, max_tokens=300,
    )
    trainer = UATTrainer(model, args, train_corpora=data["train"], dev_corpora=dev, processing_class=tokenizer)

    def record(step: int) -> dict:
        history = trainer.corpus_distribution.history
        return {"p": trainer.corpus_sampler.probabilities.tolist(),
                "rewards": history[-1]["multiuat"]["rewards"] if history else None}

    trainer.add_callback(RecordSteps(out / f"rank{trainer.accelerator.process_index}.jsonl", record))
    trainer.train()
    write_done(out, trainer)
    finish(trainer.accelerator)


if __name__ == "__main__":
    main(sys.argv[1])
