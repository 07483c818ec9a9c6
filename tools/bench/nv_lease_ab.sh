#!/bin/bash
# tools/bench/nv_lease_ab.sh - on the GPU machine (device tool, carry .nvdev):
# the open A/Bs of issues #29, #28 and #25 in one call, for a lease that may
# be the session's only one: nv_wait_forms_ab.sh (the copy engine's adds,
# captured replays per arming form, small messages per list form), then
# nv_large_ab.sh (large all-gathers and all-to-alls, whole copies against
# striped). About 8 minutes with the build.
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/nv_out}
bash tools/bench/nv_wait_forms_ab.sh 2>&1 | tee $OUT/wait_forms.txt | tail -45
echo "== large"
timeout 240 bash tools/bench/nv_large_ab.sh 2>&1 | tail -22
