# GPU section: the driver API as the application sees it (sourced by
# .gpu/run_gpu.sh with MODE, G, RUN, LOGS and record; runs for MODE "all" or
# "driver").
#
#   1. tests/apps/driver_api (dlopen of libcuda.so.1, entry points from
#      cuGetProcAddress and cudaGetDriverEntryPointByVersion, the primary
#      context, driver memory/copies/memsets, stream write/wait-value,
#      events, a runtime kernel on driver memory) passes natively and under
#      revenant-run --backend=cuda, with equal checksums;
#      and, killed between its stream wait-on-value and the releasing write
#      and after its PTX module load, recovered by a replacement agent with
#      the same checksum;
#   2. maps_probe loading the real driver by name and by its path under the
#      shim: every load is answered by the shim and libcuda is never mapped;
#   3. where PyTorch is installed: torch.cuda.init() and one small tensor
#      computation natively and under the shim (the surface PyTorch reaches
#      first is the driver's: cuDevicePrimaryCtxGetState).
if [ "$MODE" = all ] || [ "$MODE" = driver ]; then
  echo
  echo "=== the driver API"
  nlog="$LOGS/driver_api.native.log"; clog="$LOGS/driver_api.cuda.log"
  timeout 120 "$G/apps/driver_api.bin" >"$nlog" 2>&1; rc=$?
  if [ $rc -eq 0 ] && grep -q "^PASS driver_api" "$nlog"; then s=PASS; else s="FAIL (rc=$rc)"; fi
  record "driver_api native" "$s" "$nlog"
  timeout 150 $RUN -n 1 --backend=cuda --timeout=120 -- "$G/apps/driver_api.bin" >"$clog" 2>&1; rc=$?
  if [ $rc -eq 0 ] && grep -q "^\[r0\] PASS driver_api" "$clog"; then s=PASS; else s="FAIL (rc=$rc)"; fi
  record "driver_api revenant --backend=cuda" "$s" "$clog"
  ref=$(sed -n 's/^driver_api checksum=\([0-9a-f]*\)$/\1/p' "$nlog")
  got=$(sed -n 's/^\[r0\] driver_api checksum=\([0-9a-f]*\)$/\1/p' "$clog")
  if [ -n "$ref" ] && [ "$got" = "$ref" ]; then s=PASS; else s="FAIL (native '$ref', cuda '$got')"; fi
  record "driver_api checksum native = cuda" "$s" "$clog"
  for calls in 27 51; do
    log="$LOGS/driver_api.cuda.chaos$calls.log"
    timeout 150 $RUN -n 1 --backend=cuda --timeout=120 --chaos="rank=0,calls=$calls" -- \
      "$G/apps/driver_api.bin" >"$log" 2>&1
    got=$(sed -n 's/^\[r0\] driver_api checksum=\([0-9a-f]*\)$/\1/p' "$log")
    if [ -n "$ref" ] && [ "$got" = "$ref" ] && grep -q "replacement agent for rank" "$log"
    then s=PASS; else s="FAIL (native '$ref', recovered '$got')"; fi
    record "driver_api cuda, agent killed after $calls calls" "$s" "$log"
  done

  real=$(ldconfig -p | awk '$1 == "libcuda.so.1" { print $NF; exit }')
  log="$LOGS/maps_probe_driver.cuda.log"
  timeout 120 $RUN -n 1 --backend=cuda --timeout=90 -- "$G/apps/maps_probe.bin" "$real" >"$log" 2>&1; rc=$?
  if [ $rc -eq 0 ] && [ -n "$real" ] && grep -q "driver loads answered: 3" "$log" &&
     grep -q "libcuda mapped: no" "$log"; then s=PASS; else s="FAIL (rc=$rc, driver '$real')"; fi
  record "dlopen of the real driver answered by the shim" "$s" "$log"

  py="${TORCH_PYTHON:-/opt/torch/.venv/bin/python}"
  if [ -x "$py" ]; then
    script="$LOGS/torch_driver.py"
    cat >"$script" <<'PY'
import torch
torch.cuda.init()
a = torch.arange(4096, dtype=torch.float32, device="cuda")
print("torch result", float((a * 2 + 1).sum().item()))
PY
    nlog="$LOGS/torch_driver.native.log"; clog="$LOGS/torch_driver.cuda.log"
    timeout 300 "$py" "$script" >"$nlog" 2>&1; rc=$?
    ref=$(sed -n 's/^torch result \(.*\)$/\1/p' "$nlog")
    if [ $rc -eq 0 ] && [ -n "$ref" ]; then s=PASS; else s="FAIL (rc=$rc)"; fi
    record "torch tensor native" "$s" "$nlog"
    timeout 300 $RUN -n 1 --backend=cuda --timeout=240 -- "$py" "$script" >"$clog" 2>&1; rc=$?
    got=$(sed -n 's/^\[r0\] torch result \(.*\)$/\1/p' "$clog")
    if [ $rc -eq 0 ] && [ -n "$ref" ] && [ "$got" = "$ref" ]; then s=PASS; else s="FAIL (rc=$rc, native '$ref', shim '$got')"; fi
    record "torch tensor revenant --backend=cuda" "$s" "$clog"
  else
    echo "no PyTorch at $py (TORCH_PYTHON): the torch items are not run"
  fi
fi
