"""Peak memory of a block of code, for the benchmark scripts (one implementation for all of them)."""

from __future__ import annotations

import threading
import time

import psutil
import torch


class PeakMemory:
    """Peak memory during a ``with`` block: the CUDA allocator's on a GPU, the process RSS sampled every 2 ms on
    a CPU. ``peak`` is the rise above the block's start, ``absolute`` the maximum itself."""

    def __init__(self, device: torch.device) -> None:
        self.device, self.peak, self.absolute = device, 0, 0

    def __enter__(self) -> PeakMemory:
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated()
        else:
            self.process = psutil.Process()
            self.base, self.running = self.process.memory_info().rss, True
            self.thread = threading.Thread(target=self._sample, daemon=True)
            self.thread.start()
        return self

    def _sample(self) -> None:
        while self.running:
            self.absolute = max(self.absolute, self.process.memory_info().rss)
            time.sleep(0.002)

    def __exit__(self, *exc: object) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            self.absolute = torch.cuda.max_memory_allocated()
        else:
            self.running = False
            self.thread.join()
        self.peak = max(self.absolute - self.base, 0)
