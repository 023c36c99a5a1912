#!/usr/bin/env bash
# Live checks on a node with an NVIDIA GPU and no network (the device machine lent to some sessions):
#   1. install gpucomm as a wheel, built from this checkout with no index (its dependencies are the
#      node's own, plus the wheels in .whl/: defusedxml and typer 0.28, which that image lacks);
#   2. run the GPU tests: python -m pytest -q --run-gpu tests/test_gpu_live.py;
#   3. record what the node looks like and what gpucomm and NCCL make of it, as captures to replay
#      offline: nvidia-smi (-q, -q -x, topo -m, nvlink), gpucomm probe / show / doctor / paths / rings /
#      predict, NCCL's own topology dump and INIT/GRAPH/TUNING log from a one-rank torch job, and an
#      nccl-tests style sweep from `gpucomm bench collective`.
# Everything lands in $OUT/gpu-live.tar.gz (plus pytest.log and summary.txt beside it).
# Prepare .whl/ where pip can reach an index (the device machine has none):
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux2014_x86_64 -d .whl defusedxml==0.7.1 typer==0.28.0
# Usage (device machine): bash tools/device_check.sh        Bounded: every step has a timeout.
set -u
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
O=${OUT:-/tmp/gpu-live-out}
C=/tmp/gpu-live/cap
mkdir -p "$O" "$C"
S=$O/summary.txt
step() {  # step NAME TIMEOUT CMD...: stdout -> cap/NAME.out, stderr -> cap/NAME.err, rc and seconds -> summary
  local name=$1 t=$2; shift 2
  local t0=$EPOCHREALTIME
  timeout "$t" "$@" >"$C/$name.out" 2>"$C/$name.err"
  local rc=$?
  printf '%-28s rc=%-3s %6.2fs  %s\n' "$name" "$rc" "$(python3 -c "print($EPOCHREALTIME - $t0)")" "$*" >>"$S"
}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
  || { echo "wheel install failed"; exit 1; }
python3 -m pip wheel -q --no-index --no-deps --no-build-isolation -w /tmp/gpucomm-wheel . >"$C/wheel.log" 2>&1 \
  || { cat "$C/wheel.log"; exit 1; }
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site /tmp/gpucomm-wheel/gpucomm-*.whl \
  || { echo "gpucomm install failed"; exit 1; }
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
{ date -u; uname -a; python3 --version; python3 -c 'import gpucomm, typer, torch; print("gpucomm", gpucomm.__version__,
  gpucomm.__file__, "typer", typer.__version__, "torch", torch.__version__, "cuda", torch.version.cuda,
  "nccl", torch.cuda.nccl.version() if torch.cuda.is_available() else None)'; } >"$S" 2>&1

# 1. the GPU tests, on the installed wheel
timeout 300 python3 -m pytest -q --run-gpu tests/test_gpu_live.py -rA 2>&1 | tee "$O/pytest.log" | tail -5 >>"$S"

# 2. what the node is (the driver's view)
step smi                 30 nvidia-smi
step smi-q               60 nvidia-smi -q
step smi-q-xml           60 nvidia-smi -q -x
step smi-topo-m          30 nvidia-smi topo -m
step smi-nvlink-s        30 nvidia-smi nvlink -s
step smi-nvlink-status   30 nvidia-smi nvlink --status
step lspci-tv            30 lspci -tv
step numactl-H           30 numactl -H
step sys-class           30 bash -c 'ls -l /sys/class/net /sys/class/infiniband /sys/bus/pci/devices 2>&1; cat /proc/cpuinfo | head -30'

# 3. what gpucomm makes of it (wheel install); probe timed three times
for i in 1 2 3; do step "probe-$i" 60 gpucomm probe --format json; done
cp "$C/probe-1.out" "$C/node.json"
step probe-sources       60 gpucomm probe --sources nvml,sysfs,ib,net,numa --format json
step probe-table         60 gpucomm probe
step show                60 gpucomm show "$C/node.json"
step doctor              60 gpucomm doctor "$C/node.json"
step paths               60 gpucomm paths "$C/node.json"
step rings               60 gpucomm rings "$C/node.json"
step predict             60 gpucomm predict "$C/node.json" --size 8B:8GiB
step env                 60 gpucomm plan "$C/node.json" --emit env
step nccl-xml-export     60 gpucomm show "$C/node.json" --format nccl-xml

# 4. NCCL's own view: topology dump + INIT/GRAPH/TUNING log from one rank
cat >/tmp/gpu-live/nccl_one.py <<'EOF'
import os, time, torch, torch.distributed as dist
dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29517", rank=0, world_size=1)
x = torch.ones(64 << 20, device="cuda")
for _ in range(3):
    dist.all_reduce(x)
torch.cuda.synchronize()
print("ok", x[0].item())
dist.destroy_process_group()
EOF
step nccl-one 120 env NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,GRAPH,ENV,TUNING,NET \
  NCCL_TOPO_DUMP_FILE="$C/nccl-topo.xml" NCCL_GRAPH_DUMP_FILE="$C/nccl-graph.xml" python3 /tmp/gpu-live/nccl_one.py
[ -s "$C/nccl-topo.xml" ] && {
  step nccl-xml-show   60 gpucomm show "$C/nccl-topo.xml"
  step nccl-xml-rings  60 gpucomm rings "$C/nccl-topo.xml" --compare "$C/nccl-one.out"
  step nccl-xml-diff   60 gpucomm diff "$C/node.json" "$C/nccl-topo.xml"
}

# 5. an nccl-tests style sweep from the wheel (one rank: the collectives are local copies)
step bench-collective 240 gpucomm bench collective --backend nccl --nproc 1 --sizes 8B:1GiB --iters 5 --warmup 2 \
  --ops all_reduce,all_gather,broadcast

tar czf "$O/gpu-live.tar.gz" -C /tmp/gpu-live cap
cat "$S"
