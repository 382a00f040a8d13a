"""An MLP fed from pinned-memory batches, timed with CUDA events.

Each step fills a pinned host buffer on the CPU, uploads it with
non_blocking=True, and measures the step between two CUDA events; the final
parameters' SHA-256 is printed. DistributedDataParallel over NCCL when
launched with several ranks.
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
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--print-every", type=int, default=10)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()

    torch.use_deterministic_algorithms(True)
    rank, world, device = train_common.setup("nccl")
    train_common.startup_line(t_start, t_imported)
    torch.manual_seed(args.seed)
    model = nn.Sequential(nn.Linear(512, 1024), nn.GELU(), nn.Linear(1024, 10)).to(device)
    if world > 1 or torch.distributed.is_initialized():
        model = DDP(model, device_ids=[device.index])
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    loss_fn = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(args.seed * 1000 + rank)
    xh = torch.empty(args.batch, 512, pin_memory=True)
    yh = torch.empty(args.batch, dtype=torch.long, pin_memory=True)
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    times = []
    for step in range(args.steps):
        torch.cuda.synchronize()  # the pinned buffers are free to refill
        xh.copy_(torch.randn(args.batch, 512, generator=gen))
        yh.copy_(torch.randint(0, 10, (args.batch,), generator=gen))
        start.record()
        x, y = xh.cuda(non_blocking=True), yh.cuda(non_blocking=True)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
        if step % args.print_every == 0 or step == args.steps - 1:
            print(f"rank {rank} step {step} loss {loss.item():.6f}", flush=True)
    train_common.report(rank, model, times, extra=" (CUDA events)")
    train_common.finish()


if __name__ == "__main__":
    main()
