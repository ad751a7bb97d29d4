"""Wiring into the Hugging Face Trainer: config, ``UATTrainer``, ``attach_balancing``, the balancing callback."""
