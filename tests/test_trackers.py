"""The learned mix in a tracker: TensorBoard event files of a tiny run hold the p scalars and the p figure."""

from __future__ import annotations

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from uat_hf.training.mix_figure import MIX_FIGURE_TAG
from uat_hf.training.uat_config import UATConfig
from uat_hf.training.uat_trainer import UATTrainer

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_tensorboard_gets_the_p_scalars_and_a_p_figure_at_each_update(tmp_path, corpora, tokenizer, tiny_model):
    args = UATConfig(output_dir=str(tmp_path / "out"), report_to=["tensorboard"],
                     strategy="multiuat", mc_samples=2, update_every=2, max_steps=4, max_tokens=400, logging_steps=2,
                     save_strategy="no", use_cpu=True, disable_tqdm=True, corpus_health_checks=0)
    trainer = UATTrainer(tiny_model, args, train_corpora=corpora["train"], dev_corpora=corpora["dev"],
                         processing_class=tokenizer)
    trainer.train()
    (event_file,) = (tmp_path / "out" / "runs").rglob("events.out.tfevents.*")  # output_dir/runs/<date_host>/
    events = EventAccumulator(str(event_file), size_guidance={"images": 0, "scalars": 0})
    events.Reload()
    assert MIX_FIGURE_TAG in events.Tags()["images"]
    images = events.Images(MIX_FIGURE_TAG)
    assert [image.step for image in images] == [2, 4]
    assert all(image.encoded_image_string.startswith(b"\x89PNG") and image.width > 300 for image in images)
    p_bible = events.Scalars("train/balance/p_bible")
    assert [point.step for point in p_bible] == [2, 4]
    assert p_bible[-1].value == pytest.approx(trainer.corpus_distribution.as_dict()["bible"], abs=1e-6)


def test_a_static_mix_or_a_run_without_an_image_tracker_draws_nothing(tmp_path, corpora, tokenizer, tiny_model):
    from uat_hf.training.mix_figure import MixFigureCallback

    static = UATTrainer(tiny_model, UATConfig(output_dir=str(tmp_path / "a"), report_to=["tensorboard"],
                                              use_cpu=True, max_steps=2),
                        train_corpora=corpora["train"], processing_class=tokenizer)
    assert not any(isinstance(c, MixFigureCallback) for c in static.callback_handler.callbacks)
    learned = UATTrainer(tiny_model, UATConfig(output_dir=str(tmp_path / "b"), report_to=[], strategy="multiuat",
                                               mc_samples=2, update_every=1, max_steps=2, use_cpu=True),
                         train_corpora=corpora["train"], dev_corpora=corpora["dev"], processing_class=tokenizer)
    figure_callback = next(c for c in learned.callback_handler.callbacks if isinstance(c, MixFigureCallback))
    assert figure_callback._image_writers() == []  # no tracker with an image API: nothing is drawn
