#!/bin/bash
# tools/bench/nv_capi_run.sh - on the GPU machine (device tool, carry .nvdev):
# the installed library from outside - the C transport example, the Python
# package and PyTorch (examples/python/torch_allgather.py) - on the nv
# backend. Builds in /tmp/nvb, as nv_coll_run.sh does. Logs in $OUT.
#   TORCH_ARGS="4 64"   ranks and MiB per rank of the PyTorch example
set -uo pipefail
OUT=${OUT:-/tmp/nv_out}; mkdir -p "$OUT"; B=/tmp/nvb
if [ ! -f /tmp/gtest/lib/libgtest.a ]; then
  cmake -S .nvdev/googletest -B /tmp/gt -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_GMOCK=OFF \
    -DCMAKE_INSTALL_PREFIX=/tmp/gtest > /tmp/gt.log 2>&1 && ninja -C /tmp/gt install > /tmp/gt.log 2>&1
fi
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=/tmp/gtest -DGTEST_ROOT=/tmp/gtest \
  > $OUT/cfg.log 2>&1
ninja -C $B conccl_shared sdma-probe test_c_api 2>&1 | grep -E "error|warning: " | head
cmake --install $B --prefix /tmp/pfx > /dev/null
export PKG_CONFIG_PATH=/tmp/pfx/lib/pkgconfig LD_LIBRARY_PATH=/tmp/pfx/lib PYTHONPATH=python
rm -rf /tmp/tc && cp -r examples/transport_c /tmp/tc && make -C /tmp/tc -s 2>&1 | tail -3
echo "== C transport example, backend nv"; /tmp/tc/transport nv 2>&1 | tail -3
echo "== Python example, backend nv ($(python3 --version 2>&1))"; python3 examples/python/allgather.py nv 2>&1 | tail -3
echo "== Python, 4 loopback ranks on the H200"
python3 - <<'PY' 2>&1 | tail -8
import os, conccl
with conccl.Device("nv") as dev:
    print("gpus", dev.gpu_count, "engines", dev.engines(0))
    n, chunk = 4, (4 << 20) + 4096
    comm = conccl.Communicator(dev, [0] * n, loopback=True)
    data = [os.urandom(chunk * n) for _ in range(n)]
    send = [dev.alloc(0, chunk * n) for _ in range(n)]
    recv = [dev.alloc(0, chunk * n) for _ in range(n)]
    for r in range(n):
        send[r].upload(data[r])
    comm.all_to_all(send, recv, chunk)
    bad = 0
    for r in range(n):
        got = recv[r].download()
        for s in range(n):
            bad += got[s * chunk:(s + 1) * chunk] != data[s][r * chunk:(r + 1) * chunk]
    comm.all_gather(send, recv, chunk)
    for r in range(n):
        bad += recv[r].download() != b"".join(d[:chunk] for d in data)
    print("all_to_all + all_gather, 4 ranks x", chunk, "bytes:", "verified" if bad == 0 else f"{bad} blocks wrong")
    try:
        send[0].memoryview()
    except conccl.Error as e:
        print("view of HBM refused:", e.status)
PY
echo "== test_c_api"; $B/tests/c_api/test_c_api 2>&1 | tail -2
echo "== PyTorch, step by step (tools/bench/nv_torch_steps.py)"
STEPS_WATCHDOG_S=75 timeout 90 python3 tools/bench/nv_torch_steps.py > $OUT/torch_steps.log 2>&1; echo "steps rc=$?"
grep -E "^[a-z].*: (ok|FAILED)|^steps:" $OUT/torch_steps.log
echo "== PyTorch ($(python3 -c 'import torch; print(torch.__version__)' 2>&1)): examples/python/torch_allgather.py ${TORCH_ARGS:-4 64}"
TORCH_WATCHDOG_S=140 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True timeout 150 python3 examples/python/torch_allgather.py ${TORCH_ARGS:-4 64} \
  > $OUT/torch.log 2>&1; echo "torch rc=$?"
grep -vE "^  (copy|host)\." $OUT/torch.log | tail -12 | cut -c1-400
