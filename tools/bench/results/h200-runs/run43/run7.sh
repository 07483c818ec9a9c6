set -uo pipefail
source tools/bench/nv_build_common.sh
nv_machine; nvidia-smi --query-gpu=name --format=csv,noheader
nv_configure_lib $OUT/cfg.log
nv_build sdma-probe; nv_build_time
P=$B/tools/sdma-probe/sdma-probe
sw() {  # name, timeout, args...
  local name=$1 t=$2; shift 2
  timeout $t $P "$@" --backend nv --ranks 4 --min 64M --max 256M -f 2 -n 3 -w 1 --json $OUT/$name.json > $OUT/$name.log 2>&1
  echo "== $name rc=$? ($*)"; grep -E "^ +[0-9]{6,}" $OUT/$name.log | sed "s/  */ /g"
}
sw ag 120 allgather
sw rs64 120 reducescatter -d bfloat16
sw rs64_ov 120 reducescatter -d bfloat16 --overlap
sw rs1g 120 reducescatter -d bfloat16 --staging 1G
sw rs1g_ov 120 reducescatter -d bfloat16 --staging 1G --overlap
CONCCL_REDUCE_BLOCKS=132 sw rs1g_ov_b132 120 reducescatter -d bfloat16 --staging 1G --overlap
sw ar64 150 allreduce -d bfloat16
sw ar64_ov 150 allreduce -d bfloat16 --overlap
