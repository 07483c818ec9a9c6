# run 57: the two modes of one binary: NUMA placement? (topology, then the 1 KiB all-gather pinned per node)
. tools/bench/nv_build_common.sh
nvidia-smi --query-gpu=name,driver_version,pci.bus_id --format=csv,noheader
lscpu | grep -E "^(CPU\(s\)|Socket|NUMA|Model name|Thread|Core)" ; ls /sys/devices/system/node | grep node
for d in /sys/bus/pci/devices/*; do [ "$(cat $d/vendor 2>/dev/null)" = 0x10de ] && echo "$d numa_node=$(cat $d/numa_node) local_cpus=$(cat $d/local_cpulist)"; done
nvidia-smi topo -m 2>&1 | head -8
which numactl taskset
nv_configure_tests $OUT/cfg.log
nv_build sdma-probe
P=$B/tools/sdma-probe/sdma-probe
ag() { timeout 60 "$@" $P allgather --backend nv --ranks 2 --min 1K --max 1K -n 1000 -w 50 > $OUT/ag.log 2>&1; echo "[$*] rc=$? $(grep -E '^ +[0-9]+ ' $OUT/ag.log | awk '{print $7, $14}')"; }
for i in 1 2 3 4 5 6; do ag env; done
for n in $(ls /sys/devices/system/node | grep node | sed s/node//); do
  cpus=$(cat /sys/devices/system/node/node$n/cpulist)
  for i in 1 2 3 4; do
    if which numactl >/dev/null; then ag numactl --cpunodebind=$n --membind=$n; else ag taskset -c $cpus; fi
  done
done
