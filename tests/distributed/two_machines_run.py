"""Run as machine 0 and machine 1 of `accelerate launch --num_machines 2 --num_processes 2 ...` on CPU, one process
each: a short MultiUAT training with a checkpoint, then the same run resumed from that checkpoint.

Each rank appends, after every optimizer step, its live probabilities and sampler state to OUTDIR/rank<r>.jsonl
(the uninterrupted run) and OUTDIR/rank<r>-resumed.jsonl (the resumed one), and writes a hash of the final weights
of both runs to OUTDIR/weights<r>.json, so that the test can check that the two machines agree at every step and
that the resumed run ends exactly where the uninterrupted one did.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

from run_setup import SHORT_RUN, RecordSteps, first_examples, multidomain_data, seeded_model, write_done
from teardown import finish

from uat_hf.training.uat_config import UATConfig
from uat_hf.training.uat_trainer import UATTrainer
from uat_hf.utils.checkpoints import HISTORY_FILE

SETTINGS = dict(strategy="multiuat", measure="enteos", mc_samples=2, update_every=2, scorer_lr=1e-2, scorer_steps=10,
                max_steps=6, max_tokens=200, save_strategy="steps", save_steps=3)


def weights_hash(model) -> str:
    digest = hashlib.sha256()
    for name, parameter in sorted(model.state_dict().items()):
        digest.update(name.encode() + parameter.detach().cpu().numpy().tobytes())
    return digest.hexdigest()


def trained(out: Path, folder: str, trace: str, tokenizer, data, dev, resume: str | None = None) -> UATTrainer:
    args = UATConfig(**{**SHORT_RUN, **SETTINGS, "output_dir": str(out / folder)})
    trainer = UATTrainer(seeded_model("tiny", tokenizer), args, train_corpora=data["train"], dev_corpora=dev,
                         processing_class=tokenizer)
    sampler = trainer.corpus_sampler
    trainer.add_callback(RecordSteps(out / f"{trace}{trainer.accelerator.process_index}.jsonl", lambda step: {
        "p": sampler.probabilities.tolist(), "sampler": sampler.state_dict()}))
    trainer.train(resume_from_checkpoint=resume)
    return trainer


def main(outdir: str) -> None:
    out = Path(outdir)
    tokenizer, data = multidomain_data(200, max_length=32, splits=("train", "dev"))
    dev = first_examples(data["dev"], 8)
    full = trained(out, "run", "rank", tokenizer, data, dev)
    accelerator = full.accelerator
    if accelerator.is_main_process:  # the interrupted run: the uninterrupted one's folder as it was at step 3
        shutil.copytree(out / "run" / "checkpoint-3", out / "resumed" / "checkpoint-3")
        shutil.copy(out / "run" / HISTORY_FILE, out / "resumed" / HISTORY_FILE)
    accelerator.wait_for_everyone()
    checkpoint = str(out / "resumed" / "checkpoint-3")
    resumed = trained(out, "resumed", "rank-resumed-", tokenizer, data, dev, resume=checkpoint)
    rank = accelerator.process_index
    (out / f"weights{rank}.json").write_text(json.dumps({"full": weights_hash(full.model),
                                                         "resumed": weights_hash(resumed.model)}))
    write_done(out, resumed)
    finish(accelerator)


if __name__ == "__main__":
    main(sys.argv[1])
