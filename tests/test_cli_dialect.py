"""The three command-line tools speak one dialect: uat-train's field names, HfArgumentParser style, our flags first."""

from __future__ import annotations

import types
import typing
from dataclasses import fields

import pytest

#: Concepts uat-evaluate shares with uat-train: the same flag, the same value type.
SHARED_WITH_TRAIN = (
    "corpus_dir", "corpora", "direction", "source_lang", "target_lang", "language_tags", "language_codes",
    "eval_split", "max_eval_examples", "max_source_length", "generation_num_beams", "generation_max_length",
    "per_device_eval_batch_size", "bleu_tokenize", "model_name_or_path", "tokenizer_name_or_path", "output_dir",
    "seed", "use_cpu", "torch_num_threads",
)
#: uat-evaluate's concepts that uat-train has not (a new flag must be put in one list or the other).
EVALUATE_ONLY = (
    "ood_corpora", "ood_corpus_dir", "max_new_tokens", "hypotheses_dir", "compare", "significance_test",
    "significance_samples", "alpha",
)


def train_fields() -> dict[str, type]:
    from uat_hf.cli.parsing import argument_classes

    hints = {}
    for dtype in argument_classes():
        hints.update({f.name: typing.get_type_hints(dtype)[f.name] for f in fields(dtype) if f.init})
    return hints


def value_type(hint) -> object:
    """``int | None`` → ``int``: what a value is, whether or not it may be unset."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if typing.get_origin(hint) in (typing.Union, types.UnionType) and len(args) == 1 else hint


def option_strings(parser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings}


def test_the_three_parsers_accept_the_same_flags_for_the_shared_concepts():
    from uat_hf.cli.evaluate import build_parser as evaluate_parser
    from uat_hf.cli.parsing import make_parser
    from uat_hf.cli.plot import build_parser as plot_parser

    train, evaluate, plot = (option_strings(parser()) for parser in (make_parser, evaluate_parser, plot_parser))
    for name in SHARED_WITH_TRAIN:
        for flag in (f"--{name}", f"--{name.replace('_', '-')}"):
            assert flag in train and flag in evaluate, flag
    assert "--output_dir" in plot and "--output_dir" in train
    renamed = ("--max-sentences", "--num-beams", "--tags", "--split", "--batch-size", "--output", "--tokenizer",
               "--out")
    assert not set(renamed) & (evaluate | plot)


def test_uat_evaluate_uses_uat_train_names_for_the_same_concepts():
    from uat_hf.cli.arguments import DataArguments
    from uat_hf.cli.tool_arguments import EvaluateArguments, PlotArguments

    train = train_fields()
    # uat-evaluate parses uat-train's own DataArguments (one dataclass for both tools) beside EvaluateArguments.
    evaluate = {f.name: typing.get_type_hints(dtype)[f.name] for dtype in (DataArguments, EvaluateArguments)
                for f in fields(dtype)}
    assert set(SHARED_WITH_TRAIN) <= set(train)
    assert set(SHARED_WITH_TRAIN) <= set(evaluate)
    assert set(evaluate) - set(train) == set(EVALUATE_ONLY)
    assert not set(EVALUATE_ONLY) & set(train)
    for name in SHARED_WITH_TRAIN:
        assert value_type(evaluate[name]) == value_type(train[name]), name
    assert {f.name for f in fields(PlotArguments)} - set(train) == {"plot_dir"}  # output_dir: the run's


def test_one_command_line_means_the_same_to_uat_train_and_uat_evaluate(tmp_path):
    from uat_hf.cli.evaluate import parse_arguments as parse_evaluate
    from uat_hf.cli.plot import parse_arguments as parse_plot
    from uat_hf.cli.train import parse_arguments as parse_train

    model = tmp_path / "model"
    model.mkdir()
    argv = [
        "--corpus_dir", str(tmp_path), "--corpora", "bible", "software", "--direction", "multi-domain",
        "--source_lang", "en", "--target_lang", "de", "--language_tags", "nllb",
        "--language_codes", '{"de": "gsw_Latn"}', "--eval_split", "dev",
        "--max_eval_examples", "5", "--max_source_length", "64", "--generation_num_beams", "2",
        "--generation_max_length", "20", "--per_device_eval_batch_size", "4", "--bleu_tokenize", "char",
        "--model_name_or_path", str(model), "--tokenizer_name_or_path", str(model),
        "--output_dir", str(tmp_path / "out"), "--seed", "7", "--use_cpu", "true", "--torch_num_threads", "1",
    ]
    data, evaluate = parse_evaluate(argv)
    expected = {
        "corpus_dir": str(tmp_path), "corpora": ["bible", "software"], "direction": "multi-domain",
        "source_lang": "en", "target_lang": "de", "language_tags": "nllb", "language_codes": {"de": "gsw_Latn"},
        "eval_split": "dev",
        "max_eval_examples": 5, "max_source_length": 64, "generation_num_beams": 2, "generation_max_length": 20,
        "per_device_eval_batch_size": 4, "bleu_tokenize": "char", "model_name_or_path": str(model),
        "tokenizer_name_or_path": str(model), "output_dir": str(tmp_path / "out"), "seed": 7, "use_cpu": True,
        "torch_num_threads": 1,
    }
    assert set(expected) == set(SHARED_WITH_TRAIN)
    assert {name: getattr(evaluate if hasattr(evaluate, name) else data, name) for name in expected} == expected
    trained = {}
    for arguments in parse_train(argv + ["--report_to", "none"])[:4]:
        trained.update({name: getattr(arguments, name) for name in expected if hasattr(arguments, name)})
    assert trained == expected
    assert parse_plot(["--output_dir", str(tmp_path / "out")]).output_dir == str(tmp_path / "out")


def test_the_first_argument_is_the_model_or_the_run(tmp_path):
    from uat_hf.cli.evaluate import parse_arguments as parse_evaluate
    from uat_hf.cli.plot import parse_arguments as parse_plot

    language = ["--source_lang", "en", "--target_lang", "de"]
    assert parse_evaluate(["runs/a", "--corpus_dir", str(tmp_path), *language])[1].model_name_or_path == "runs/a"
    dashed = parse_evaluate(["--corpus-dir", str(tmp_path), *language, "--model-name-or-path", "runs/a"])[1]
    assert dashed.model_name_or_path == "runs/a"
    assert parse_plot(["runs/a"]).output_dir == "runs/a"


def test_uat_train_help_lists_our_groups_and_points_to_help_all(capsys):
    # Changed on purpose (issue 25): --help shows our four groups and one line pointing to --help-all, which
    # lists the Trainer's ~150 fields too.
    from uat_hf.cli import train as cli

    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    groups = ["balancing (uat_hf.UATConfig)", "data (uat_hf.cli.DataArguments)", "model (uat_hf.cli.ModelArguments)",
              "run (uat_hf.cli.RunArguments)"]
    assert [text.index(f"\n{group}:") for group in groups] == sorted(text.index(f"\n{group}:") for group in groups)
    for ours in ("--strategy", "--mc_samples", "--corpus_dir", "--model_name_or_path", "--max_train_minutes"):
        assert ours in text
    assert "--learning_rate" not in text and "--help-all" in text.replace("\n", " ")
    with pytest.raises(SystemExit):
        cli.main(["--help-all"])
    full = capsys.readouterr().out
    assert "--learning_rate" in full and "--strategy" in full and "--corpus_dir" in full


def test_the_help_parser_and_the_real_one_agree_on_our_fields():
    from uat_hf.cli.parsing import make_help_parser, make_parser

    def options(parser):
        return {a.dest: (tuple(a.option_strings), repr(a.default), a.nargs, repr(a.choices), a.type)
                for a in parser._actions if a.dest not in ("help", "config")}

    short, full = options(make_help_parser()), options(make_parser())
    assert short.items() <= full.items()
    assert len(full) - len(short) > 100  # the Trainer's fields, listed by --help-all only
