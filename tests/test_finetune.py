"""Fine-tuning a pretrained model with ``uat-train``: its own tokenizer is used as it is, no joint tokenizer is
trained, and a language-code model (M2M100) gets its codes per corpus in training and in ``uat-evaluate``.

"Pretrained" models are tiny ones trained here and saved with ``save_pretrained`` (model + tokenizer), the layout
of a Hub checkpoint such as ``Helsinki-NLP/opus-mt-en-de`` or ``facebook/m2m100_418M``, which cannot be
downloaded offline.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from test_language_codes import TARGETS, save_m2m100_tokenizer, tiny_model
from transformers import AutoTokenizer

from conftest import MULTIDOMAIN, multidomain_specs, save_marian_tokenizer
from uat_hf.cli import evaluate as evaluate_cli
from uat_hf.cli import train as train_cli
from uat_hf.data.corpora import load_corpora, load_corpus_split
from uat_hf.models.presets import build_model
from uat_hf.training.uat_config import UATConfig
from uat_hf.training.uat_trainer import UATTrainer

RUN = ["--max_steps", "2", "--max_train_examples", "60", "--max_eval_examples", "3", "--max_source_length", "32",
       "--max_target_length", "32", "--generation_max_length", "6", "--generation_num_beams", "1",
       "--per_device_train_batch_size", "4", "--save_strategy", "no", "--eval_strategy", "no", "--report_to", "none",
       "--use_cpu", "--disable_tqdm", "true", "--strategy", "proportional"]
O2M = ["--corpus_dir", "bundled:multilingual-ddtp", "--direction", "one-to-many", "--source_lang", "en",
       "--corpora", *TARGETS]


@pytest.fixture
def no_tokenizer_training(monkeypatch):
    """Fails the test if uat-train trains a joint tokenizer (it must use the pretrained model's own)."""
    from uat_hf.data import tokenization
    def refuse(*args, **kwargs):
        raise AssertionError("uat-train trained a new tokenizer for a pretrained model")

    monkeypatch.setattr(tokenization, "train_joint_tokenizer", refuse)


def pretrained_marian(folder: Path) -> Path:
    """A tiny MarianMT model with a MarianTokenizer (the opus-mt layout), trained 3 steps and saved."""
    texts = [text for spec in multidomain_specs(300) for pair in load_corpus_split(spec, "train")
             for text in (pair["source"], pair["target"])]
    tokenizer = save_marian_tokenizer(texts, folder / "tokenizer", vocab_size=600)
    data = load_corpora(multidomain_specs(40), tokenizer, splits=("train",), max_source_length=32,
                        max_target_length=32)
    torch.manual_seed(0)
    model = build_model("tiny", tokenizer)
    args = UATConfig(output_dir=str(folder / "run"), max_steps=3, per_device_train_batch_size=4, report_to=[],
                     save_strategy="no", use_cpu=True, disable_tqdm=True)
    UATTrainer(model, args, train_corpora=data["train"], processing_class=tokenizer).train()
    model.save_pretrained(folder / "model")
    tokenizer.save_pretrained(folder / "model")
    return folder / "model"


def test_finetune_a_pretrained_marian_model_keeps_its_tokenizer(tmp_path, no_tokenizer_training):
    pretrained = pretrained_marian(tmp_path / "pretrained")
    out = tmp_path / "finetuned"
    code = train_cli.main(["--model_name_or_path", str(pretrained), "--corpus_dir", str(MULTIDOMAIN),
                           "--source_lang", "en", "--target_lang", "de", "--output_dir", str(out), *RUN])
    assert code == 0
    before, after = AutoTokenizer.from_pretrained(pretrained), AutoTokenizer.from_pretrained(out)
    assert type(after).__name__ == type(before).__name__ == "MarianTokenizer"
    assert after.get_vocab() == before.get_vocab()
    assert (out / "source.spm").read_bytes() == (pretrained / "source.spm").read_bytes()
    assert "eval_mean_bleu" in json.loads((out / "eval_results.json").read_text())


def pretrained_m2m100(folder: Path) -> Path:
    tokenizer = save_m2m100_tokenizer(folder / "tokenizer")
    model = tiny_model(tokenizer)
    model.save_pretrained(folder / "model")
    tokenizer.save_pretrained(folder / "model")
    return folder / "model"


def test_finetune_m2m100_one_to_many_with_codes_in_uat_train_and_uat_evaluate(tmp_path, monkeypatch, capsys,
                                                                              no_tokenizer_training):
    pretrained = pretrained_m2m100(tmp_path / "pretrained")
    out = tmp_path / "finetuned"
    base = ["--model_name_or_path", str(pretrained), "--output_dir", str(out), *O2M, *RUN]

    # the tokenizer places codes itself: Marian tags (the default) would train every corpus on its default codes
    assert train_cli.main(base) == 2
    assert "set language_tags to the model's scheme" in capsys.readouterr().err
    assert not (out / "model.safetensors").exists()

    assert train_cli.main([*base, "--language_tags", "m2m100"]) == 0
    assert "m2m100 codes de __en__→__de__, fr __en__→__fr__, cs __en__→__cs__" in capsys.readouterr().err
    before, after = AutoTokenizer.from_pretrained(pretrained), AutoTokenizer.from_pretrained(out)
    assert type(after).__name__ == "M2M100Tokenizer" and after.get_vocab() == before.get_vocab()
    assert (after.src_lang, after.tgt_lang) == (before.src_lang, before.tgt_lang)  # not left at the last corpus's
    results = json.loads((out / "eval_results.json").read_text())
    assert {f"eval_{name}_bleu" for name in TARGETS} <= set(results)

    seen = {}

    class Recording(UATTrainer):
        def translate(self, *args, **kwargs):
            result = super().translate(*args, **kwargs)
            seen.update({name: t.output.predictions[:, 1].tolist() for name, t in result.items()})
            seen["kwargs"] = self.corpus_generation_kwargs
            return result

    monkeypatch.setattr("uat_hf.training.uat_trainer.UATTrainer", Recording)  # uat-evaluate imports it when run
    evaluate_cli.main([str(out), *O2M, "--language_tags", "m2m100", "--max_eval_examples", "3",
                       "--generation_max_length", "6", "--use_cpu", "--output_dir", str(tmp_path / "eval")])
    ids = {name: after.convert_tokens_to_ids(f"__{name}__") for name in TARGETS}
    assert seen.pop("kwargs") == {name: {"forced_bos_token_id": ids[name]} for name in TARGETS}
    assert seen == {name: [ids[name]] * 3 for name in TARGETS}  # every translation opens with its corpus's code


def test_a_language_code_scheme_with_a_preset_model_is_refused_before_any_data(tmp_path, capsys):
    code = train_cli.main(["--model_name_or_path", "tiny", "--output_dir", str(tmp_path), *O2M, *RUN,
                           "--language_tags", "nllb"])
    assert code == 2
    error = capsys.readouterr().err
    assert "language_tags 'nllb' uses the language-code tokens of a pretrained nllb tokenizer" in error
