set -uo pipefail
source tools/bench/nv_build_common.sh
P=$B/tools/sdma-probe/sdma-probe
sw() {  # name, timeout, args...
  local name=$1 t=$2; shift 2
  timeout $t $P "$@" --backend nv --procs 4 --min 64M --max 256M -f 2 -n 2 -w 1 --json $OUT/$name.json > $OUT/$name.log 2>&1
  echo "== $name rc=$? ($*)"; grep -E "^ +[0-9]{6,}" $OUT/$name.log | sed "s/  */ /g"
}
sw rs_procs_ov 80 reducescatter -d bfloat16 --overlap
nv_mps_on; sleep 1
sw rs_procs_mps 80 reducescatter -d bfloat16
sw ag_procs_mps 60 allgather
nv_mps_off
