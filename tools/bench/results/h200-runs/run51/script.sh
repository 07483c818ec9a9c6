# run 51: issue #26 across processes under MPS: reduce-scatter's staging (64M default, 256M, 1G) beside the all-gather
. tools/bench/nv_build_common.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
nv_configure_lib $OUT/cfg.log
nv_build sdma-probe conccl_shared
P=$B/tools/sdma-probe/sdma-probe
nv_mps_on
timeout 100 $P allgather --backend nv --procs 4 --min 64M --max 256M -n 3 -w 1 > $OUT/ag.log 2>&1
echo "allgather rc=$?"; grep -E "^ +[0-9]{6,}" $OUT/ag.log 
for st in default 256M 1G; do
  sf=""; [ $st != default ] && sf="--staging $st"
  timeout 120 $P reducescatter --backend nv --procs 4 -d bfloat16 -o sum --min 64M --max 256M -n 3 -w 1 $sf > $OUT/rs_$st.log 2>&1
  echo "reducescatter staging $st rc=$?"; grep -E "^ +[0-9]{6,}" $OUT/rs_$st.log 
done
nv_mps_off
