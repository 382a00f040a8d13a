"""A small decoder-only transformer trained in bf16 autocast, deterministic.

Token embedding and learned positions, N pre-norm blocks (causal
self-attention written out as matmuls and a softmax, so that the backward
pass is deterministic; a GELU MLP of 4x the width), a final LayerNorm and an
untied output projection; AdamW (foreach), gradient clipping at 1.0, a
linear warm-up of the learning rate. Each step's tokens are drawn on the CPU
from a per-rank seeded generator into a pinned buffer and moved with
non_blocking=True, as a data loader with pin_memory does.
DistributedDataParallel over NCCL when launched with several ranks. Prints
the loss every few steps, the step time and the SHA-256 of the final
parameters.
"""
import math
import time

t_start = time.perf_counter()
import argparse  # noqa: E402
import os  # noqa: E402

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import train_common  # noqa: E402

t_imported = time.perf_counter()


class Block(nn.Module):
    def __init__(self, width, heads, seq):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, 4 * width)
        self.fc2 = nn.Linear(4 * width, width)
        mask = torch.triu(torch.ones(seq, seq, dtype=torch.bool), diagonal=1)
        self.register_buffer("mask", mask, persistent=False)

    def attention(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        h = self.heads
        q = q.view(b, t, h, c // h).transpose(1, 2)
        k = k.view(b, t, h, c // h).transpose(1, 2)
        v = v.view(b, t, h, c // h).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(c // h))
        att = att.masked_fill(self.mask[:t, :t], float("-inf"))
        att = torch.softmax(att.float(), dim=-1).to(v.dtype)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.proj(y)

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class Gpt(nn.Module):
    def __init__(self, vocab, width, heads, layers, seq):
        super().__init__()
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Parameter(torch.zeros(seq, width))
        nn.init.normal_(self.pos, std=0.02)
        self.blocks = nn.ModuleList(Block(width, heads, seq) for _ in range(layers))
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos[: idx.shape[1]]
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--print-every", type=int, default=10)
    ap.add_argument("--seed", type=int, default=2026)
    args = ap.parse_args()

    torch.use_deterministic_algorithms(True)
    rank, world, device = train_common.setup("nccl")
    train_common.startup_line(t_start, t_imported)
    torch.manual_seed(args.seed)
    model = Gpt(args.vocab, args.width, args.heads, args.layers, args.seq).to(device)
    if world > 1 or torch.distributed.is_initialized():
        model = DDP(model, device_ids=[device.index])
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, foreach=True)
    warmup = 20
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup))
    gen = torch.Generator().manual_seed(args.seed * 1000 + rank)
    pinned = torch.empty(args.batch, args.seq + 1, dtype=torch.long).pin_memory()
    times, starts = [], []
    for step in range(args.steps):
        # Tokens with some structure to learn: a per-row random walk.
        walk = torch.randint(-3, 4, (args.batch, args.seq + 1), generator=gen).cumsum(dim=1)
        pinned.copy_(walk.remainder_(args.vocab))
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        starts.append(t0)
        data = pinned.to(device, non_blocking=True)
        x, y = data[:, :-1], data[:, 1:]
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(x)
        loss = F.cross_entropy(logits.float().reshape(-1, args.vocab), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        opt.step()
        sched.step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        if step % args.print_every == 0 or step == args.steps - 1:
            print(f"rank {rank} step {step} loss {loss.item():.6f}", flush=True)
    train_common.report(rank, model, times, starts=starts)
    train_common.finish()


if __name__ == "__main__":
    main()
