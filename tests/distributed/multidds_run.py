"""Run under ``accelerate launch`` (2 CPU processes): UATTrainer with MultiDDS-S for a few steps.

Usage: ``accelerate launch ... multidds_run.py OUTDIR [DEV_SHARING]``. Every rank appends its live corpus
probabilities after each balancing update to ``OUTDIR/rank{r}.jsonl`` and writes ``OUTDIR/rank{r}.done``
when training has finished; the test compares the ranks.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from run_setup import RecordSteps, first_examples, multidomain_data, seeded_model, short_run_config
from teardown import finish

from uat_hf.strategies.multidds_s.gradient_cosine import GradientCosineReward
from uat_hf.training.uat_trainer import UATTrainer

UPDATE_EVERY = 2
MAX_STEPS = 6


def main() -> None:
    out = Path(sys.argv[1])
    dev_sharing = sys.argv[2] if len(sys.argv) > 2 else "auto"
    torch.set_num_threads(1)
    tokenizer, data = multidomain_data(400, max_length=48, tokenizer_examples=1000, vocab_size=1200)
    dev = first_examples(data["dev"], 24)
    model = seeded_model("tiny", tokenizer)
    args = short_run_config(
        out, strategy="multidds-s", max_steps=MAX_STEPS, update_every=UPDATE_EVERY, max_tokens=300,
        learning_rate=3e-3, dev_batch_tokens=200, strategy_settings={"train_batch_tokens": 200}, scorer_lr=0.05,
        scorer_steps=20, eval_strategy="no", seed=0,
    )
    trainer = UATTrainer(model, args, train_corpora=data["train"], dev_corpora=dev, processing_class=tokenizer)
    trainer.balancing.reward = GradientCosineReward(dev_sharing=dev_sharing, train_batch_tokens=200)
    rank = trainer.accelerator.process_index
    balancing = trainer.balancing

    def after_update(step: int) -> dict | None:
        """This rank's p and ψ after each balancing update (the callback runs after the balancing one)."""
        if step % UPDATE_EVERY:
            return None
        scorer = balancing.distribution.proposer.scorer
        return {"updates": balancing.update_count, "p": trainer.corpus_sampler.probabilities.tolist(),
                "psi": scorer.state_dict() if scorer is not None else None}

    trainer.add_callback(RecordSteps(out / f"rank{rank}.jsonl", after_update))
    result = trainer.train()
    num_processes = trainer.accelerator.num_processes
    (out / f"rank{rank}.done").write_text(json.dumps({
        "global_step": result.global_step, "num_processes": num_processes,
        "distributed": torch.distributed.is_initialized(),
        "broadcast": trainer.balancing.reward._use_broadcast(num_processes, rank),
    }))
    finish(trainer.accelerator)


if __name__ == "__main__":
    main()
