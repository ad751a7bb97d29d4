"""Run under ``accelerate launch --multi_gpu --num_processes 2 ...`` on CPU: MC dropout on an FSDP2-sharded model.

Accelerate does not shard on CPU (its FSDP mode needs GPUs), so the script shards a tiny Marian model itself
with ``torch.distributed.fsdp.fully_shard`` over the gloo process group accelerate starts. The dev batches
give the ranks unequal work under the plain split (3 corpora × K=3 passes over 2 ranks, corpora of 2, 1
and 3 sub-batches: 11 forwards against 7), which hangs a sharded model. Each rank writes
``OUTDIR/rank{r}.json``: the summed rewards of the sharded run, those of the same computation on an
unsharded copy (both ranks' shares computed locally), its forward count, and whether training still works.
"""

from __future__ import annotations

import copy
import json
import sys
from datetime import timedelta
from pathlib import Path

import torch
from accelerate import Accelerator, InitProcessGroupKwargs
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from transformers import MarianConfig, MarianMTModel

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from teardown import finish  # noqa: E402

from uat_hf.models.modes import sharding  # noqa: E402
from uat_hf.strategies.multiuat.uncertainty import UncertaintyReward  # noqa: E402

PAD, EOS, VOCAB = 63, 0, 64


def batch(rows: int, width: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
    ids = torch.randint(1, PAD, (rows, width), generator=generator)
    labels = torch.randint(1, PAD, (rows, width), generator=generator)
    labels[:, -1] = EOS
    labels[0, width // 2:] = -100  # padding in one row
    decoder = torch.cat([torch.full((rows, 1), PAD), labels[:, :-1].clamp(min=0)], dim=1)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "decoder_input_ids": decoder, "labels": labels}


def main(outdir: str) -> None:
    # A hang (unequal collectives) fails after 60 s instead of gloo's default 30 minutes.
    accelerator = Accelerator(cpu=True, kwargs_handlers=[InitProcessGroupKwargs(timeout=timedelta(seconds=60))])
    rank, world = accelerator.process_index, accelerator.num_processes
    config = MarianConfig(vocab_size=VOCAB, d_model=16, encoder_layers=2, decoder_layers=2, encoder_ffn_dim=32,
                          decoder_ffn_dim=32, encoder_attention_heads=2, decoder_attention_heads=2,
                          max_position_embeddings=32, pad_token_id=PAD, eos_token_id=EOS, decoder_start_token_id=PAD,
                          dropout=0.1)
    torch.manual_seed(0)
    model = MarianMTModel(config)
    whole = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(1)
    dev_batches = [[batch(2, 5, generator), batch(3, 7, generator)], [batch(4, 6, generator)],
                   [batch(1, 4, generator), batch(2, 8, generator), batch(3, 3, generator)]]
    reward = UncertaintyReward("entsent", 3, mode="loop")
    seeds = [100 + r for r in range(world)]

    expected = sum(reward.compute(whole, dev_batches, process_index=r, num_processes=world, seed=seeds[r])["rewards"]
                   for r in range(world))

    mesh = init_device_mesh("cpu", (world,))
    for layer in [*model.model.encoder.layers, *model.model.decoder.layers]:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    forwards = []
    model.register_forward_pre_hook(lambda module, args: forwards.append(1))
    share = reward.compute(model, dev_batches, process_index=rank, num_processes=world, seed=seeds[rank])["rewards"]
    measured_forwards = len(forwards)
    total = accelerator.reduce(torch.as_tensor(share, dtype=torch.float64), reduction="sum").numpy()
    grads_none = all(p.grad is None for p in model.parameters())

    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)  # training goes on after the measurement
    loss = model(**{k: v for k, v in dev_batches[0][0].items() if k != "decoder_input_ids"}).loss
    loss.backward()
    optimizer.step()
    record = {"rank": rank, "world": world, "sharding": sharding(model), "forwards": measured_forwards,
              "rewards": total.tolist(), "expected": expected.tolist(), "grads_none_after_measuring": grads_none,
              "trained": bool(torch.isfinite(loss))}
    (Path(outdir) / f"rank{rank}.json").write_text(json.dumps(record))
    finish(accelerator)


if __name__ == "__main__":
    main(sys.argv[1])
