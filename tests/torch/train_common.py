"""Plain PyTorch helpers shared by the training scripts in this folder.

Nothing here knows about Revenant: the scripts run the same under torchrun,
under revenant-run, or as a single process (no launcher: one rank).
"""
import hashlib
import os
import statistics
import time

import torch
import torch.distributed as dist


def setup(backend="nccl"):
    """Joins the process group when launched with several ranks; returns
    (rank, world_size, device)."""
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local % torch.cuda.device_count())
    torch.cuda.set_device(device)
    if world > 1 or os.environ.get("MASTER_ADDR"):
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29511")
        dist.init_process_group(backend, rank=rank, world_size=world)
    return rank, world, device


def params_sha256(model):
    """SHA-256 of every parameter's bytes, in order."""
    h = hashlib.sha256()
    for p in model.parameters():
        t = p.detach().contiguous().cpu()
        h.update(t.view(torch.uint8).numpy().tobytes() if _has_numpy() else
                 bytes(t.view(torch.uint8).tolist()))
    return h.hexdigest()


def _has_numpy():
    try:
        import numpy  # noqa: F401
        return True
    except ImportError:
        return False


def report(rank, model, step_times, extra="", starts=None, slowest=8):
    """Prints the median, min and mean step time over the steady steps (the
    last four fifths) and the parameters' SHA-256. With `starts` (each
    step's time.perf_counter() at its start: CLOCK_MONOTONIC on Linux, the
    clock of the agent's REVENANT_TIMELINE lines) also the `slowest` steady
    steps, slowest first, with their start times."""
    first = len(step_times) // 5
    steady = step_times[first:] or step_times
    # The mean too: steps a snapshot or a recovery slowed are in it, not in
    # the median.
    print(f"rank {rank} step time median {statistics.median(steady) * 1e3:.3f} ms "
          f"(min {min(steady) * 1e3:.3f} ms, mean {statistics.mean(steady) * 1e3:.3f} ms, "
          f"{len(steady)} steps){extra}", flush=True)
    if starts is not None and len(starts) == len(step_times) and slowest > 0:
        idx = range(first, len(step_times)) if len(steady) < len(step_times) else range(len(step_times))
        worst = sorted(idx, key=lambda i: step_times[i], reverse=True)[:slowest]
        # How much of the mean is in a few slow steps: their time above the
        # median against all steady steps' time above it.
        med = statistics.median(steady)
        over = [t - med for t in steady if t > 2 * med]
        print(f"rank {rank} steps over twice the median: {len(over)} of {len(steady)}, "
              f"{sum(over) * 1e3:.3f} ms above the median of "
              f"{sum(max(t - med, 0) for t in steady) * 1e3:.3f} ms in all", flush=True)
        print(f"rank {rank} slowest steps: " + "; ".join(
            f"step {i} at {starts[i]:.6f} s: {step_times[i] * 1e3:.3f} ms" for i in worst),
            flush=True)
    print(f"rank {rank} params sha256 {params_sha256(model)}", flush=True)


def startup_line(t_start, t_imported):
    """Prints import-torch and first-CUDA-op times (t_start taken before the
    import)."""
    t0 = time.perf_counter()
    torch.zeros(1, device="cuda").add_(1)
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    print(f"startup import torch {t_imported - t_start:.3f} s, first CUDA op {t1 - t0:.3f} s, "
          f"total {t1 - t_start:.3f} s", flush=True)


def finish():
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
