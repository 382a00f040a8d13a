"""Prints what a launcher gave this process: its rank variables and argv."""
import os
import sys

keys = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"]
print("launch " + " ".join(f"{k}={os.environ.get(k, '-')}" for k in keys)
      + " argv=" + "|".join(sys.argv[1:]) + f" main={__name__}", flush=True)
