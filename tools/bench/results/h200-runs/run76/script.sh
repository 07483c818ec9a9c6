# run 76: run 75 again with its fixes (GPU words never host Signals), the median host time per call (host p50),
# torch send/recv through the store against the engines (CONCCL_TORCH_P2P), and the torch backend's
# emulator tests on torch 2 (PREMUL_SUM).
# window calls on a stream (2, 4, 8 processes), under MPS, and host-ordered; the modes alternate.
# Blocks run most-wanted first; each starts only within RUN76_SECONDS (default 430) of the build's start.
. tools/bench/nv_build_common.sh
nvidia-smi --query-gpu=name --format=csv,noheader
nv_configure_tests $OUT/cfg.log
nv_build conccl_shared nv_window_bench sdma-probe test_nv_mp_stream
nv_build_time
# First the multi-process stream tests with the GPU words (every byte checked), then the A/B.
CONCCL_POSTED_WORDS=device nv_run_test backends/nv/test_nv_mp_stream 120 20
mv $OUT/test_nv_mp_stream.log $OUT/mp_stream_device.log
# The torch backend's collectives on the emulator with this machine's torch 2 (CI has 1.13):
# PREMUL_SUM's factor reaches Python only on torch 2; functional collectives and DTensor (skipped on 1.13).
( nv_python_env $PWD/python; cd tests/python && CONCCL_TORCH_TEST_DEADLINE=80 timeout 120 python3 -m unittest \
  test_torch_backend.TorchBackendTest.test_collectives_3_ranks \
  test_torch_backend.TorchBackendTest.test_torch2_functional_collectives_and_dtensor_3_ranks test_torch_multinode.MultiNodeTest.test_2_nodes_x_2_ranks \
  > $OUT/torch2_emu.log 2>&1; echo "torch 2 emulator tests rc=$?"; grep -E "^\[|^Ran|^OK|FAIL|Error" $OUT/torch2_emu.log | head -24 )
W=$B/tools/bench/nv_window_bench
P=$(find $B -name sdma-probe -type f | head -1)
row() { echo "$1 rc=$2: $(grep -E '^ +(1024|8192|65536) ' $OUT/$3 | awk '{printf "%s:%s/%s/p50 %s(w%s) ", $1/1024 "K", $2, $3, $4, $7}')"; }
time_left() { [ $(( $(date +%s) - t0 )) -lt ${RUN76_SECONDS:-430} ] || { echo "stopped for time at: $1"; return 1; }; }
ab() {  # label procs extra-args...
  local label=$1 p=$2; shift 2
  for m in device host device host; do
    time_left "$label $m" || return
    CONCCL_POSTED_WORDS=$m timeout 60 $W --procs $p "$@" --min 1K --max 64K --iters 2000 > $OUT/cur.log 2>&1
    row "$label $m" $? cur.log; mv $OUT/cur.log $OUT/${label// /_}_${m}_$RANDOM.log
  done
}
ab "2p stream" 2
nv_mps_on
ab "2p MPS" 2
ab "4p MPS" 4
nv_mps_off
ab "2p host-ordered" 2 --host
ab "4p stream" 4
ab "8p stream" 8
time_left graph && { CONCCL_POSTED_WORDS=device timeout 60 $W --procs 2 --graph --min 1K --max 8K --iters 500 > $OUT/g2.log 2>&1; row "2p graph device" $? g2.log; }
time_left allreduce && { timeout 60 $P allreduce --backend nv --procs 2 --min 1K --max 4M -d float > $OUT/ar2.log 2>&1; echo "allreduce 2 procs rc=$?"; tail -6 $OUT/ar2.log; }
time_left torch_p2p && { nv_python_env; timeout 150 python3 tools/bench/torch_p2p_bench.py --nprocs 2 --device cuda \
  --min 1K --max 64M --iters 20 --json $OUT/torch_p2p.json > $OUT/torch_p2p.log 2>&1; echo "torch p2p rc=$?"; tail -14 $OUT/torch_p2p.log; }
# One archive comes back (the device tool returns at most 8 files): every log in it.
cd $OUT && tar czf /tmp/logs.tgz . 2>/dev/null && rm -rf $OUT/* && mv /tmp/logs.tgz $OUT/logs.tgz
