# Run 43's device scripts (.nvdev/run7.sh .. run10.sh), each run from the
# repository root on the device machine after `source tools/bench/nv_build_common.sh`,
# `nv_configure_lib $OUT/cfg.log; nv_build sdma-probe` (run9 and run10 reused
# run8's warm build). Their shared sweep function, with RANKS the ranks flag
# ("--ranks 4" or "--procs 4") and MIN/MAX/ITERS as each run set them:
P=$B/tools/sdma-probe/sdma-probe
sw() {  # name, timeout, sdma-probe args...
  local name=$1 t=$2; shift 2
  timeout $t $P "$@" --backend nv $RANKS --min $MIN --max $MAX -f 2 -n $ITERS -w 1 --json $OUT/$name.json > $OUT/$name.log 2>&1
  echo "== $name rc=$? ($*)"; grep -E "^ +[0-9]{6,}" $OUT/$name.log | sed "s/  */ /g"
}

run7() {  # h100_c_*: loopback ranks, 64M..256M, 3 timed calls
  RANKS="--ranks 4" MIN=64M MAX=256M ITERS=3
  sw ag 120 allgather
  sw rs64 120 reducescatter -d bfloat16
  sw rs64_ov 120 reducescatter -d bfloat16 --overlap
  sw rs1g 120 reducescatter -d bfloat16 --staging 1G
  sw rs1g_ov 120 reducescatter -d bfloat16 --staging 1G --overlap
  CONCCL_REDUCE_BLOCKS=132 sw rs1g_ov_b132 120 reducescatter -d bfloat16 --staging 1G --overlap
  sw ar64 150 allreduce -d bfloat16
  sw ar64_ov 150 allreduce -d bfloat16 --overlap
}

run8() {  # h100_d_ag/rs (loopback to 1G) and h100_d_*_procs (64M..256M), 2 timed calls
  RANKS="--ranks 4" MIN=256M MAX=1G ITERS=2
  sw ag 140 allgather
  sw rs 160 reducescatter -d bfloat16
  RANKS="--procs 4" MIN=64M MAX=256M
  sw ag_procs 80 allgather
  sw rs_procs 100 reducescatter -d bfloat16
}

run9() {  # h100_d_rs_procs_ov, then with CUDA MPS
  RANKS="--procs 4" MIN=64M MAX=256M ITERS=2
  sw rs_procs_ov 80 reducescatter -d bfloat16 --overlap
  nv_mps_on; sleep 1
  sw rs_procs_mps 80 reducescatter -d bfloat16
  sw ag_procs_mps 60 allgather
  nv_mps_off
}

run10() {  # with CUDA MPS
  RANKS="--procs 4" MIN=64M MAX=256M ITERS=2
  nv_mps_on; sleep 1
  sw rs_procs_mps_ov 80 reducescatter -d bfloat16 --overlap
  sw ar_procs_mps 80 allreduce -d bfloat16
  nv_mps_off
}
