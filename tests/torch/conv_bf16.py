"""A small convolutional net (cuDNN) trained in bf16 autocast.

conv 3->32 (3x3) - ReLU - conv 32->64 (3x3, stride 2) - ReLU - global mean -
linear 64->10; SGD with momentum; cuDNN deterministic, no autotuning.
DistributedDataParallel over NCCL when launched with several ranks.
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


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 32, 3, padding=1)
        self.c2 = nn.Conv2d(32, 64, 3, stride=2, padding=1)
        self.fc = nn.Linear(64, 10)

    def forward(self, x):
        x = torch.relu(self.c1(x))
        x = torch.relu(self.c2(x))
        return self.fc(x.mean(dim=(2, 3)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--print-every", type=int, default=10)
    ap.add_argument("--seed", type=int, default=99)
    args = ap.parse_args()

    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    rank, world, device = train_common.setup("nccl")
    train_common.startup_line(t_start, t_imported)
    torch.manual_seed(args.seed)
    model = Net().to(device)
    if world > 1 or torch.distributed.is_initialized():
        model = DDP(model, device_ids=[device.index])
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(args.seed * 1000 + rank)
    times, starts = [], []
    for step in range(args.steps):
        x = torch.randn(args.batch, 3, 32, 32, generator=gen)
        y = torch.randint(0, 10, (args.batch,), generator=gen)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        starts.append(t0)
        x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
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
