"""The README's minimal example, kept as a file so that the test suite runs it exactly as printed there."""

from uat_hf import UATConfig, UATTrainer
from uat_hf.corpora import BUNDLED_DIR, corpus_specs_from_directory, load_corpora, load_corpus_split
from uat_hf.presets import build_model
from uat_hf.tokenization import train_joint_tokenizer

# Four English→German domains of different sizes, bundled with the package (first 2,000 pairs each).
specs = corpus_specs_from_directory(BUNDLED_DIR / "multidomain-en-de", "en", "de", max_examples=2000)
tokenizer = train_joint_tokenizer([load_corpus_split(s, "train") for s in specs], vocab_size=2000)
data = load_corpora(specs, tokenizer, max_source_length=64, max_target_length=64)

args = UATConfig(
    output_dir="uat_example",
    strategy="multiuat",      # or proportional / temperature / uniform / multidds-s
    measure="enteos",         # pretp, exptp, vartp, comev, entsent, enteos
    mc_samples=5,             # K Monte Carlo dropout passes (paper: 30)
    update_every=20,          # S optimizer steps between re-balancing (paper: 1000-2000)
    max_tokens=1024,          # token budget per batch
    max_steps=40,
    learning_rate=1e-3,
    generation_max_length=32,
    generation_num_beams=1,
    report_to=[],
)
trainer = UATTrainer(
    build_model("tiny", tokenizer),
    args,
    train_corpora=data["train"],
    dev_corpora={name: ds.select(range(100)) for name, ds in data["dev"].items()},
    eval_corpora={name: ds.select(range(50)) for name, ds in data["test"].items()},
    processing_class=tokenizer,
)
trainer.train()
metrics = trainer.evaluate()
print({k: round(v, 2) for k, v in metrics.items() if k.endswith(("_bleu", "_chrf"))})
print("p =", dict(zip(trainer.corpus_sampler.names, trainer.corpus_sampler.probabilities.round(3).tolist())))
