#!/bin/sh
# The real-GPU session, as one script (a lent GPU machine is held by the minute): what the
# hardware and driver say of themselves, the smoke check and the fake-vs-real comparison with
# two CUDA processes running, the poll's cost against the floor under load and idle.
#
#     sh bench/real_gpu_run.sh OUTDIR
#
# Read-only on the GPU: nvidia-smi queries, NVML Get calls, and plain CUDA work
# (bench/real_gpu_load.py). Writes OUTDIR/run.log, nvidia-smi.txt, nvidia-smi-q.txt,
# nvidia-smi-q.xml, metrics.txt (the served /metrics under load) and snapshot.json.
set -u
out=${1:?usage: real_gpu_run.sh OUTDIR}
mkdir -p "$out"
cd "$(dirname "$0")/.." || exit 2
export PYTHONUNBUFFERED=1
exec >"$out/run.log" 2>&1
step() { printf '\n== %s (%s)\n' "$*" "$(date -u +%H:%M:%S)"; }
step host
uname -r; python3 --version; python3 -c 'import pynvml, aiohttp, prometheus_client; print("nvidia-ml-py", getattr(pynvml, "__version__", "?"), "aiohttp", aiohttp.__version__)'
nvidia-smi --query-gpu=name,pci.device_id,driver_version,vbios_version,memory.total,memory.reserved,power.default_limit,power.min_limit,power.max_limit,clocks.max.sm,clocks.max.mem,mig.mode.current,compute_mode --format=csv
nvidia-smi -q >"$out/nvidia-smi-q.txt" 2>&1
nvidia-smi -q -x >"$out/nvidia-smi-q.xml" 2>&1
step "MIG profiles (answers only where MIG is on; nothing is changed)"
nvidia-smi mig -lgip 2>&1 | head -40
step "two CUDA processes start"
python3 bench/real_gpu_load.py --seconds 170 --gib 6 --grow-gib 4 & a=$!
python3 bench/real_gpu_load.py --seconds 170 --gib 3 & b=$!
sleep 20
nvidia-smi >"$out/nvidia-smi.txt" 2>&1
step "smoke, under load"
timeout 120 python3 bench/real_gpu_smoke.py --polls 10 --save-metrics "$out/metrics.txt"
echo "exit $?"
step "one-shot snapshot, under load"
timeout 60 python3 -m exporter snapshot --pretty >"$out/snapshot.json"; echo "exit $?"
step "poll cost, under load"
timeout 150 python3 bench/real_gpu_cost.py --polls 30 --serve-seconds 60; echo "exit $?"
wait $a $b
step "poll cost, idle"
timeout 100 python3 bench/real_gpu_cost.py --polls 30 --serve-seconds 40; echo "exit $?"
step done
