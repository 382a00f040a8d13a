"""A deterministic MLP trained with DistributedDataParallel over NCCL.

MLP 1024-4096-4096-10, AdamW, fp32, batches made on the CPU with a per-rank
seeded generator and moved with .cuda(non_blocking=True). Prints the loss
every few steps, the step time and the SHA-256 of the final parameters.
"""
import time

t_start = time.perf_counter()
import argparse  # noqa: E402
import os  # noqa: E402

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import train_common  # noqa: E402

t_imported = time.perf_counter()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--print-every", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()

    torch.use_deterministic_algorithms(True)
    rank, world, device = train_common.setup("nccl")
    train_common.startup_line(t_start, t_imported)
    torch.manual_seed(args.seed)
    model = nn.Sequential(nn.Linear(1024, args.hidden), nn.ReLU(),
                          nn.Linear(args.hidden, args.hidden), nn.ReLU(),
                          nn.Linear(args.hidden, 10)).to(device)
    if world > 1 or torch.distributed.is_initialized():
        model = DDP(model, device_ids=[device.index])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(args.seed * 1000 + rank)
    times, starts = [], []
    for step in range(args.steps):
        x = torch.randn(args.batch, 1024, generator=gen)
        y = torch.randint(0, 10, (args.batch,), generator=gen)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        starts.append(t0)
        x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        if step % args.print_every == 0 or step == args.steps - 1:
            print(f"rank {rank} step {step} loss {loss.item():.6f}", flush=True)
    train_common.report(rank, model, times, starts=starts)
    train_common.finish()


if __name__ == "__main__":
    main()
