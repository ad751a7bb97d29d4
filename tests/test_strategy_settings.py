"""A strategy's own settings live with it (its settings_class, as peft's method configs): a new strategy with two
settings is one file outside the package, set from uat-train's command line (--strategy.<setting>) and from a recipe
(strategy_settings), saved in recipe.yaml, refused by name when unknown or mistyped."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest
import yaml
from test_cli_inputs import RUN, write_recipe

from uat_hf.cli import train as cli
from uat_hf.training.uat_config import UATConfig
from uat_hf.utils.checkpoints import HISTORY_FILE

STRATEGY = textwrap.dedent('''
    """p ∝ dev loss ** power, never below floor: a strategy with two settings of its own, in one file."""
    from dataclasses import dataclass

    import numpy as np

    from uat_hf.strategies.base import BalancingStrategy, Proposal
    from uat_hf.strategies.mixing_law.dev_loss import DevLoss


    @dataclass
    class PoweredLossSettings:
        power: float = 1.0
        floor: float = 0.05

        def __post_init__(self):
            if not 0 <= self.floor < 0.5:
                raise ValueError(f"floor must be in [0, 0.5), got {self.floor}")


    class PoweredLoss(BalancingStrategy):
        settings_class = PoweredLossSettings

        def __init__(self, names, prior, *, power=1.0, floor=0.05):
            super().__init__(names, prior)
            self.power, self.floor = power, floor

        @classmethod
        def build_reward(cls, config, model, tokenizer=None, accelerator=None):
            return DevLoss()

        def propose(self, measurement):
            p = np.maximum(measurement.values ** self.power, 1e-12)
            p = np.maximum(p / p.sum(), self.floor)
            return Proposal(p / p.sum(), {"power": self.power, "floor": self.floor})
''')


@pytest.fixture
def strategy_module(tmp_path, monkeypatch):
    (tmp_path / "powered_loss.py").write_text(STRATEGY, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "powered_loss:PoweredLoss"
    sys.modules.pop("powered_loss", None)


def test_a_new_strategys_settings_come_from_the_command_line_and_a_recipe(tmp_path, strategy_module):
    run = {**RUN, "strategy": strategy_module, "update_every": 1, "max_steps": 2}
    out = tmp_path / "flags"
    assert cli.main(["--config", str(write_recipe(tmp_path, {**run, "output_dir": str(out)})),
                     "--strategy.power", "2", "--strategy.floor", "0.2"]) == 0
    history = [json.loads(line) for line in (out / HISTORY_FILE).read_text().splitlines()]
    assert [record[strategy_module] for record in history] == [{"power": 2.0, "floor": 0.2}] * 2
    assert min(min(record["probabilities"].values()) for record in history) >= 0.2 - 1e-9
    saved = yaml.safe_load((out / "recipe.yaml").read_text())
    assert saved["strategy_settings"] == {"power": 2.0, "floor": 0.2}  # typed, and repeatable from the recipe

    again = tmp_path / "recipe"
    settings = {"strategy_settings": {"power": 2.0, "floor": 0.2}}
    recipe = write_recipe(tmp_path, {**run, "output_dir": str(again), **settings})
    assert cli.main(["--config", str(recipe)]) == 0
    assert [json.loads(line)[strategy_module] for line in (again / HISTORY_FILE).read_text().splitlines()] == [
        {"power": 2.0, "floor": 0.2}] * 2


def test_unknown_mistyped_or_misplaced_settings_are_refused_by_name(tmp_path, strategy_module):
    def config(**settings):
        return UATConfig(output_dir=str(tmp_path), strategy=strategy_module, strategy_settings=settings,
                         use_cpu=True)

    assert config(power=3).strategy_class.knobs(config(power=3)) == {"power": 3, "floor": 0.05}
    with pytest.raises(ValueError, match=r"has no setting 'pwr'; its settings are power, floor"):
        config(pwr=3)
    with pytest.raises(ValueError, match=r"setting power takes a float, got 'high'"):
        config(power="high")
    with pytest.raises(ValueError, match=r"floor must be in \[0, 0.5\), got 0.7"):
        config(floor=0.7)
    with pytest.raises(ValueError, match=r"strategy_settings \['power'\] given, but strategy 'proportional' has no "
                                         r"settings of its own"):
        UATConfig(output_dir=str(tmp_path), strategy="proportional", strategy_settings={"power": 2}, use_cpu=True)
    recipe = write_recipe(tmp_path, {**RUN, "strategy": "proportional", "output_dir": str(tmp_path / "x")})
    assert cli.main(["--config", str(recipe), "--multiuat.power", "2"]) == 2  # another strategy's setting
