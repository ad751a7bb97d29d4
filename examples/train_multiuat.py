"""Train one translation model on several corpora with MultiUAT, using the Python API under ``accelerate``.

The same script runs on one CPU, on several GPUs and on several machines: ``accelerate launch`` decides
how many processes start, and ``UATTrainer`` keeps the corpus distribution identical on every rank. It
shows the whole path a user writes by hand — corpora, a joint tokenizer, a model, ``UATConfig``,
``UATTrainer``, per-corpus test BLEU, the saved model and the balancing plots — on the bundled sample
data by default, so it runs offline in minutes::

    accelerate launch --config_file examples/accelerate_configs/single_cpu.yaml examples/train_multiuat.py

Every ``UATConfig`` / ``Seq2SeqTrainingArguments`` field is a flag (``--strategy multidds-s``,
``--max_steps 2000``, ``--measure exptp`` ...); the defaults below are small so that a demo finishes on a
laptop. For real data, point ``--corpus_dir`` at a directory in the same layout, or use ``--model
Helsinki-NLP/opus-mt-en-de`` (its own tokenizer is then loaded unless ``--tokenizer`` says otherwise).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import torch
from accelerate import PartialState
from transformers import HfArgumentParser

from uat_hf.checkpoints import HISTORY_FILE
from uat_hf.corpora import DIRECTIONS, corpus_specs_from_directory, corpus_tags, load_corpora, load_corpus_split
from uat_hf.corpus_specs import resolve_bundled
from uat_hf.metrics import format_table
from uat_hf.plotting import plot_run
from uat_hf.presets import MODEL_PRESETS, build_model
from uat_hf.tokenization import load_tokenizer, train_joint_tokenizer
from uat_hf.uat_config import UATConfig
from uat_hf.uat_trainer import UATTrainer

logger = logging.getLogger("train_multiuat")


@dataclass
class ScriptArguments:
    """Data and model; training and balancing settings are the fields of ``UATConfig``."""

    corpus_dir: str = field(
        default="bundled:multidomain-en-de",
        metadata={
            "help": "Directory of NAME.{train,dev,test}.jsonl.gz files; 'bundled:NAME' for the shipped samples."
        },
    )
    corpora: list[str] | None = field(default=None, metadata={"help": "NAMEs to train on (default: all)."})
    direction: str = field(
        default="multi-domain", metadata={"help": f"How NAMEs map to language pairs: {', '.join(sorted(DIRECTIONS))}."}
    )
    source_lang: str = field(default="en", metadata={"help": "Source language (ignored when NAMEs are sources)."})
    target_lang: str = field(default="de", metadata={"help": "Target language (ignored when NAMEs are targets)."})
    max_train_examples: int | None = field(default=2000, metadata={"help": "First N training pairs per corpus."})
    max_eval_examples: int = field(default=100, metadata={"help": "Test pairs per corpus translated at the end."})
    max_length: int = field(default=64, metadata={"help": "Truncate sources and targets to this many tokens."})
    model: str = field(
        default="small",
        metadata={"help": f"A preset ({', '.join(MODEL_PRESETS)}), a model directory or a Hub id (org/name)."},
    )
    tokenizer: str | None = field(
        default=None,
        metadata={"help": "Tokenizer directory or Hub id. Default: the model's own for a pretrained model, else a "
                  "joint BPE trained on the training corpora."},
    )
    vocab_size: int = field(default=4000, metadata={"help": "Size of the joint BPE vocabulary when one is trained."})


#: Small enough for a CPU demo; every one can be overridden on the command line.
DEMO_DEFAULTS = dict(
    output_dir="runs/multiuat-bundled",
    strategy="multiuat",
    measure="enteos",
    mc_samples=5,
    update_every=25,
    dev_batch_tokens=512,
    max_steps=150,
    max_tokens=2048,
    learning_rate=1e-3,
    warmup_steps=30,
    logging_steps=25,
    save_strategy="no",
    eval_strategy="no",
    report_to="none",
    per_device_eval_batch_size=32,
    generation_max_length=64,
    generation_num_beams=1,
    # On a machine without CUDA, several `accelerate launch` processes only form a (gloo) group with use_cpu.
    use_cpu=not torch.cuda.is_available(),
)


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = HfArgumentParser((ScriptArguments, UATConfig))
    parser.set_defaults(**DEMO_DEFAULTS)
    script, config = parser.parse_args_into_dataclasses(args=argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        return train(script, config)
    finally:
        # Without this, gloo aborts at interpreter exit in about half of multi-process CPU runs.
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


def train(script: ScriptArguments, config: UATConfig) -> dict[str, float]:
    _ = config.device  # sets torch.distributed up exactly as the Trainer will (gloo on CPU, NCCL on GPUs)
    state = PartialState()
    output_dir = Path(config.output_dir)
    specs = corpus_specs_from_directory(
        resolve_bundled(script.corpus_dir), **_language_pair(script), corpora=script.corpora,
        direction=script.direction, max_examples=script.max_train_examples,
    )
    # The main process trains and saves the tokenizer (and fills the datasets cache); the others then read both.
    with state.main_process_first():
        tokenizer = _tokenizer(script, specs, output_dir, is_main=state.is_main_process)
        data = load_corpora(specs, tokenizer, max_source_length=script.max_length, max_target_length=script.max_length)
    test = {name: ds.select(range(min(script.max_eval_examples, len(ds)))) for name, ds in data["test"].items()}

    torch.manual_seed(config.seed)
    model = build_model(script.model, tokenizer)
    trainer = UATTrainer(
        model, config, train_corpora=data["train"], dev_corpora=data["dev"], eval_corpora=test,
        processing_class=tokenizer,
    )
    trainer.train()
    metrics = trainer.evaluate(metric_key_prefix="test")
    trainer.save_model()
    if state.is_main_process:
        per_corpus = {name: {"bleu": metrics[f"test_{name}_bleu"], "chrf": metrics[f"test_{name}_chrf"]}
                      for name in test}
        print(f"\nTest set ({config.strategy}, {trainer.state.global_step} steps)\n{format_table(per_corpus)}")
        if (output_dir / HISTORY_FILE).is_file():
            for path in plot_run(output_dir):
                print(f"wrote {path}")
        else:
            print(f"No {HISTORY_FILE}: strategy {config.strategy!r} keeps p fixed (or no update was reached).")
    return metrics


def _language_pair(script: ScriptArguments) -> dict[str, str | None]:
    """The corpus NAMEs are the source languages (many-to-one) or the target languages (one-to-many)."""
    mode = DIRECTIONS.get(script.direction, script.direction)
    return {
        "source_lang": None if mode == "many-to-one" else script.source_lang,
        "target_lang": None if mode == "one-to-many" else script.target_lang,
    }


def _tokenizer(script: ScriptArguments, specs, output_dir: Path, *, is_main: bool):
    if script.tokenizer or script.model not in MODEL_PRESETS:
        return load_tokenizer(script.tokenizer or script.model)
    if not is_main:
        return load_tokenizer(str(output_dir))
    tags = sorted({tag for tag in corpus_tags(specs).values() if tag})
    tokenizer = train_joint_tokenizer([load_corpus_split(spec, "train") for spec in specs],
                                      vocab_size=script.vocab_size, special_tokens=tags)
    tokenizer.save_pretrained(str(output_dir))
    return tokenizer


if __name__ == "__main__":
    main()
