"""The corpus distribution p (its one owner) and the batch sampler that draws every batch from it."""
