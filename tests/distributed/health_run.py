"""Run under `accelerate launch --multi_gpu --num_processes 2 ...` on CPU: a short run with the corpus-health
checks' continuous down-weight (corpus_health_action=down_weight), whose ranks are made to disagree.

The checks run on every rank. Here each rank's verdicts are replaced by numbers of its own (rank 0: corpus
``bible`` damaged at the first two checks, at a ratio of 0.3 then 0.2, sound at the third; rank 1 the reverse), so
the test can check that both ranks follow the main process's verdicts: the same caps, the same p, the same draws.
Each rank appends its p and its sampler state after every optimizer step to OUTDIR/rank<r>.jsonl.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from run_setup import RecordSteps, first_examples, multidomain_data, seeded_model, short_run_config, write_done
from teardown import finish

from uat_hf.evaluation.corpus_health import CorpusHealth, SampleCheck
from uat_hf.training.health_callback import CorpusHealthCallback
from uat_hf.training.uat_trainer import UATTrainer

#: Per rank, bible's ratio of source uses at each check (None: sound).
VERDICTS = {0: {2: 0.3, 4: 0.2, 6: None}, 1: {2: None, 4: None, 6: 0.5}}


def own_numbers(health: CorpusHealth, rank: int) -> CorpusHealth:
    """This rank's made-up check at ``health.step``: every corpus sound and clearly measurable, bible at the ratio
    :data:`VERDICTS` gives (400 sentences each side: z about −19 at a ratio of 0.3)."""
    gains = np.random.default_rng(0).standard_normal(400) * 0.5
    gains -= gains.mean()
    ratio = VERDICTS[rank][health.step]
    train = [SampleCheck(1.0, gains + (ratio if n == "bible" and ratio is not None else 1.0)) for n in health.names]
    return CorpusHealth(health.step, health.names, train, [SampleCheck(1.0, gains + 1.0)] * len(health.names))


def main(outdir: str) -> None:
    out = Path(outdir)
    tokenizer, data = multidomain_data(200, max_length=32, splits=("train", "dev"))
    model = seeded_model("tiny", tokenizer)
    args = short_run_config(out, strategy="proportional", corpus_health_action="down_weight",
                            corpus_health_checks=3, corpus_health_share=0.01, max_steps=6, max_tokens=200)
    trainer = UATTrainer(model, args, train_corpora=data["train"], dev_corpora=first_examples(data["dev"], 8),
                         processing_class=tokenizer)
    rank = trainer.accelerator.process_index
    health = next(c for c in trainer.callback_handler.callbacks if isinstance(c, CorpusHealthCallback))
    down_weight = health._down_weight
    health._down_weight = lambda measured: down_weight(own_numbers(measured, rank))
    sampler = trainer.corpus_sampler
    trainer.add_callback(RecordSteps(out / f"rank{rank}.jsonl", lambda step: {
        "p": sampler.probabilities.tolist(), "caps": dict(trainer.corpus_distribution.caps),
        "sampler": sampler.state_dict()}))
    trainer.train()
    write_done(out, trainer)
    finish(trainer.accelerator)


if __name__ == "__main__":
    main(sys.argv[1])
