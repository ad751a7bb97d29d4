"""uat-hf's messages follow the verbosity a Transformers user sets, and the commands' progress goes to standard
error through them (the results table stays on standard output)."""

from __future__ import annotations

import logging

import pytest
import transformers
from test_cli_inputs import RUN, write_recipe

from uat_hf.cli import train as cli
from uat_hf.utils.logging import enable_propagation, get_verbosity, set_verbosity


@pytest.fixture
def as_outside_tests():
    """The library's logger as a user has it: no propagation to pytest's root handlers; Transformers at warning."""
    enable_propagation(False)
    transformers.logging.set_verbosity_warning()
    yield
    transformers.logging.set_verbosity_warning()
    set_verbosity(None)


def test_library_messages_follow_transformers_verbosity_until_given_their_own(as_outside_tests, capsys):
    logger = logging.getLogger("uat_hf.training.callback")

    def shown(level: int) -> bool:
        logger.log(level, "a message")
        return "[uat-hf] " in capsys.readouterr().err

    assert not shown(logging.INFO) and shown(logging.WARNING)  # Transformers' default: warnings
    assert "[uat-hf] WARNING: careful" in (logger.warning("careful") or capsys.readouterr().err)
    transformers.logging.set_verbosity_info()
    assert shown(logging.INFO)
    transformers.logging.set_verbosity_error()
    assert not shown(logging.WARNING) and shown(logging.ERROR)
    set_verbosity("info")  # uat-hf's own level wins over Transformers'
    assert get_verbosity() == logging.INFO and shown(logging.INFO)
    set_verbosity(None)
    assert not shown(logging.WARNING)
    with pytest.raises(ValueError, match="Unknown log level 'loud'"):
        set_verbosity("loud")


def test_uat_train_progress_is_on_stderr_and_log_level_quiets_it(as_outside_tests, tmp_path, capsys):
    recipe = write_recipe(tmp_path, {**RUN, "output_dir": str(tmp_path / "default")})
    assert cli.main(["--config", str(recipe)]) == 0
    default = capsys.readouterr()
    assert "[uat-hf] corpora: de (en→de), fr (en→fr)" in default.err and "[uat-hf]" not in default.out
    assert "results" in default.out and "mean" in default.out  # the table is the command's output
    recipe = write_recipe(tmp_path, {**RUN, "output_dir": str(tmp_path / "quiet"), "log_level": "warning"})
    assert cli.main(["--config", str(recipe)]) == 0
    quiet = capsys.readouterr()
    assert "[uat-hf] corpora:" not in quiet.err and "mean" in quiet.out
