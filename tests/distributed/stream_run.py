"""Run under `accelerate launch --multi_gpu --num_processes 2 ...` on CPU: MultiUAT over streamed corpora.

Two bundled corpora are read as streams (``uat_hf.data.streams``), each rank reading its half. Each rank appends,
after every optimizer step, its live p and a digest of the batches it trained on to OUTDIR/rank<r>.jsonl, and at the
end the corpus drawn for every global batch position to OUTDIR/drawn<r>.

``OUTDIR MAX_STEPS SAVE_STEPS [resume]``: train MAX_STEPS steps saving every SAVE_STEPS (and resume from the last
checkpoint in OUTDIR/run); each rank then writes a digest of its final weights to OUTDIR/weights<r>.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from run_setup import (
    RecordSteps,
    first_examples,
    multidomain_data,
    multidomain_specs,
    seeded_model,
    short_run_config,
    write_done,
)
from teardown import finish

from uat_hf.data.corpora import PreprocessingConfig
from uat_hf.data.streams import load_corpus_stream, prepare_stream
from uat_hf.sampling import stream_batches
from uat_hf.training.uat_trainer import UATTrainer

NAMES = ("bible", "software")


class DigestTrainer(UATTrainer):
    def training_step(self, model, inputs, num_items_in_batch=None):
        self.digests.append(hashlib.sha256(json.dumps(inputs["input_ids"].tolist()).encode()).hexdigest()[:16])
        return super().training_step(model, inputs, num_items_in_batch)


def main(outdir: str, max_steps: int, save_steps: int, resume: bool = False) -> None:
    out = Path(outdir)
    tokenizer, data = multidomain_data(50, max_length=32, splits=("dev",))
    streams = {
        spec.name: prepare_stream(
            load_corpus_stream(spec),
            tokenizer,
            PreprocessingConfig(dedupe=False),
            max_source_length=32,
            max_target_length=32,
        )
        for spec in multidomain_specs(120)
        if spec.name in NAMES
    }
    args = short_run_config(
        out,
        strategy="multiuat",
        measure="exptp",
        mc_samples=2,
        update_every=2,
        scorer_lr=1e-1,
        scorer_steps=10,
        max_steps=max_steps,
        max_tokens=200,
        stream_buffer_examples=12,
        save_strategy="steps",
        save_steps=save_steps,
    )
    trainer = DigestTrainer(
        seeded_model("tiny", tokenizer),
        args,
        train_corpora=streams,
        processing_class=tokenizer,
        dev_corpora=first_examples({n: data["dev"][n] for n in NAMES}, 8),
    )
    trainer.digests = []
    sampler = trainer.corpus_sampler
    drawn: list[str] = []  # the corpus drawn for every global batch position, this rank's or not
    pick = stream_batches.pick_corpus

    def recording_pick(cumulative, u):
        corpus = pick(cumulative, u)
        drawn.append(sampler.names[corpus])
        return corpus

    stream_batches.pick_corpus = recording_pick

    def record(step):
        entry = {"p": sampler.probabilities.tolist(), "batches": list(trainer.digests)}
        trainer.digests.clear()
        return entry

    trainer.add_callback(RecordSteps(out / f"rank{trainer.accelerator.process_index}.jsonl", record))
    trainer.train(resume_from_checkpoint=resume or None)
    (out / f"drawn{trainer.accelerator.process_index}").write_text(json.dumps(drawn))
    weights = hashlib.sha256(b"".join(p.detach().cpu().numpy().tobytes() for p in trainer.model.parameters()))
    (out / f"weights{trainer.accelerator.process_index}").write_text(weights.hexdigest())
    write_done(out, trainer)
    finish(trainer.accelerator)


if __name__ == "__main__":
    main(sys.argv[1], *map(int, sys.argv[2:4]), resume=sys.argv[4:] == ["resume"])
