set -uo pipefail
source tools/bench/nv_build_common.sh
nv_machine; nvidia-smi --query-gpu=name --format=csv,noheader
nv_configure_lib $OUT/cfg.log
nv_build sdma-probe; nv_build_time
P=$B/tools/sdma-probe/sdma-probe
sw() {  # name, timeout, min, max, ranks-flag, args...
  local name=$1 t=$2 min=$3 max=$4 rk=$5; shift 5
  timeout $t $P "$@" --backend nv $rk 4 --min $min --max $max -f 2 -n 2 -w 1 --json $OUT/$name.json > $OUT/$name.log 2>&1
  echo "== $name rc=$? ($rk 4 $*)"; grep -E "^ +[0-9]{6,}" $OUT/$name.log | sed "s/  */ /g"
}
sw ag 140 256M 1G --ranks allgather
sw rs 160 256M 1G --ranks reducescatter -d bfloat16
sw ag_procs 80 64M 256M --procs allgather
sw rs_procs 100 64M 256M --procs reducescatter -d bfloat16
