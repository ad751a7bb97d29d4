"""Run under `accelerate launch --multi_gpu --num_processes 2 ...` on CPU: a short one-to-many M2M100 training with
MultiUAT, each corpus with its own language codes.

OUTDIR/tokenizer holds the M2M100Tokenizer (built once by the test, so both ranks read the same one). Each rank
writes OUTDIR/rank<r>.json: the first input and label token of every training batch, those of every MC-dropout dev
batch per corpus, its final p, and the second generated token (after the decoder start) of every translation.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from run_setup import first_examples, short_run_config
from teardown import finish
from test_language_codes import one_to_many_specs, tiny_model
from transformers import M2M100Tokenizer

from uat_hf.data.corpora import load_corpora
from uat_hf.data.language_codes import corpus_language_codes, generation_kwargs
from uat_hf.training.uat_trainer import UATTrainer


def main(outdir: str) -> None:
    out = Path(outdir)
    tokenizer = M2M100Tokenizer.from_pretrained(out / "tokenizer")
    specs = one_to_many_specs(60)
    data = load_corpora(specs, tokenizer, tags="m2m100", max_source_length=32, max_target_length=32)
    codes = corpus_language_codes(specs, "m2m100")
    args = short_run_config(
        out, strategy="multiuat", measure="enteos", mc_samples=2, update_every=2, scorer_lr=1e-2, scorer_steps=5,
        max_steps=4, per_device_train_batch_size=4, generation_max_length=6, generation_num_beams=1,
    )
    trainer = UATTrainer(
        tiny_model(tokenizer), args, train_corpora=data["train"], dev_corpora=first_examples(data["dev"], 6),
        eval_corpora=first_examples(data["test"], 3),
        processing_class=tokenizer, corpus_generation_kwargs=generation_kwargs(tokenizer, codes),
    )
    record = {"train": [], "dev": []}
    compute_loss, reward = trainer.compute_loss, trainer.balancing.reward
    measure = reward.compute

    def loss(model, inputs, *rest, **kwargs):
        record["train"].append([inputs["input_ids"][:, 0].tolist(), inputs["labels"][:, 0].tolist()])
        return compute_loss(model, inputs, *rest, **kwargs)

    def rewards(model, dev_batches, *rest, **kwargs):
        names = trainer.corpus_distribution.names
        record["dev"].append({name: [[b["input_ids"][:, 0].tolist(), b["labels"][:, 0].tolist()] for b in batches]
                              for name, batches in zip(names, dev_batches)})
        return measure(model, dev_batches, *rest, **kwargs)

    trainer.compute_loss, reward.compute = loss, rewards
    trainer.train()
    record["p"] = trainer.corpus_distribution.probabilities.tolist()
    record["generated"] = {name: t.output.predictions[:, 1].tolist() for name, t in trainer.translate().items()}
    record["world"] = trainer.accelerator.num_processes
    rank = trainer.accelerator.process_index
    (out / f"rank{rank}.json").write_text(json.dumps(record))
    finish(trainer.accelerator)


if __name__ == "__main__":
    main(sys.argv[1])
