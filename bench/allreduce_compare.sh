#!/bin/bash
# dtrain's ring all-reduce against Gloo's ring and Open MPI's MPI_Allreduce (TCP), same sizes and rank
# counts, in one invocation; each row is the median of the runs' busbw (GB/s). dtrain+tls is dtrain with
# a job token and TLS 1.3 on the data plane (tls/plain: what encryption costs); dtrain-mpi is comm::mpi
# over the same Open MPI (TCP) as the mpi column (dmpi/mpi: what dtrain's checks and polling cost).
# dtrain-shm is dtrain through shared memory (-s 1: what ranks on one host use in training) and mpi-shm
# Open MPI over its shared-memory btl (vader); shm/mpi-shm compares the two. dtrain-nocrc is the TCP ring
# with frames that carry no CRC-32C (-x 0): crc/nocrc is what the per-frame integrity check costs.
# A second table per rank count has the TCP ring with the values in 16 bits on the wire (-z bf16, -z fp16:
# communication_options::gradient_compression), its busbw counted in the floats' bytes, against FP32.
#   bench/allreduce_compare.sh [build dir] [runs]
set -eu
B=${1:-build}/bench
runs=${2:-3}
args="-b 4K -e 64M -f 4 -n 20 -w 5"
[ -x "$B/allreduce_perf" ] || { echo "build allreduce_perf first (cmake --build build --target allreduce_perf)"; exit 1; }
have_gloo=0; [ -x "$B/gloo_allreduce" ] && have_gloo=1
have_mpi=0; [ -x "$B/mpi_allreduce" ] && command -v mpirun > /dev/null && have_mpi=1
have_dmpi=0; [ -x "$B/mpi_comm_perf" ] && command -v mpirun > /dev/null && have_dmpi=1
mpirun="mpirun --allow-run-as-root --oversubscribe --mca btl tcp,self"
mpirun_shm="mpirun --allow-run-as-root --oversubscribe --mca btl vader,self"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
median() { sort -g | awk '{v[NR]=$1} END {print (NR ? v[int((NR+1)/2)] : "n/a")}'; }
for p in 2 4; do
  for r in $(seq "$runs"); do
    "$B/allreduce_perf" $args -c 0 -p $p -s 0 | grep -v '^#' > "$tmp/dtrain.$p.$r"
    "$B/allreduce_perf" $args -c 0 -p $p -s 0 -x 0 | grep -v '^#' > "$tmp/nocrc.$p.$r"
    "$B/allreduce_perf" $args -c 0 -p $p -s 1 | grep -v '^#' > "$tmp/shm.$p.$r"
    "$B/allreduce_perf" $args -c 0 -p $p -t 1 | grep -v '^#' > "$tmp/tls.$p.$r"
    "$B/allreduce_perf" $args -c 0 -p $p -s 0 -z bf16 | grep -v '^#' > "$tmp/bf16.$p.$r"
    "$B/allreduce_perf" $args -c 0 -p $p -s 0 -z fp16 | grep -v '^#' > "$tmp/fp16.$p.$r"
    [ $have_gloo = 1 ] && "$B/gloo_allreduce" $args -p $p | grep -v '^#' > "$tmp/gloo.$p.$r"
    [ $have_mpi = 1 ] && $mpirun -np $p "$B/mpi_allreduce" $args 2>/dev/null | grep -v '^#' > "$tmp/mpi.$p.$r"
    [ $have_mpi = 1 ] && $mpirun_shm -np $p "$B/mpi_allreduce" $args 2>/dev/null | grep -v '^#' > "$tmp/mpishm.$p.$r"
    [ $have_dmpi = 1 ] && $mpirun -np $p "$B/mpi_comm_perf" $args -c 0 2>/dev/null | grep -v '^#' > "$tmp/dmpi.$p.$r"
  done
  echo "# all_reduce, $p ranks (processes) on loopback, float sum; busbw in GB/s (median of $runs runs), time for 4 KiB in us"
  printf "%12s %10s %10s %10s %10s %10s %12s %12s %10s %10s %11s %11s %14s %13s %10s\n" "size(B)" dtrain gloo mpi dtrain+tls \
    dtrain-mpi dtrain/gloo dtrain/mpi tls/plain dmpi/mpi dtrain-shm mpi-shm shm/mpi-shm dtrain-nocrc crc/nocrc
  for size in $(awk '{print $1}' "$tmp/dtrain.$p.1"); do
    col() { cat "$tmp"/$1.$p.* 2>/dev/null | awk -v s="$size" -v c="$2" '$1 == s {print $c}' | median; }
    d=$(col dtrain 7); g=$(col gloo 7); m=$(col mpi 7); t=$(col tls 7); dm=$(col dmpi 7); s=$(col shm 7); ms=$(col mpishm 7)
    nc=$(col nocrc 7)
    ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b == "n/a" || b == 0) print "n/a"; else printf "%.2f", a / b }'; }
    printf "%12s %10s %10s %10s %10s %10s %12s %12s %10s %10s %11s %11s %14s %13s %10s\n" "$size" "$d" "$g" "$m" "$t" "$dm" \
      "$(ratio "$d" "$g")" "$(ratio "$d" "$m")" "$(ratio "$t" "$d")" "$(ratio "$dm" "$m")" "$s" "$ms" "$(ratio "$s" "$ms")" \
      "$nc" "$(ratio "$d" "$nc")"
  done
  echo "# the same ring with the values in 16 bits on the wire; busbw in the floats' GB/s"
  printf "%12s %10s %10s %10s %10s %10s\n" "size(B)" dtrain dtrain-bf16 dtrain-fp16 bf16/fp32 fp16/fp32
  for size in $(awk '{print $1}' "$tmp/dtrain.$p.1"); do
    d=$(col dtrain 7); b=$(col bf16 7); h=$(col fp16 7)
    printf "%12s %10s %10s %10s %10s %10s\n" "$size" "$d" "$b" "$h" "$(ratio "$b" "$d")" "$(ratio "$h" "$d")"
  done
  lat() { cat "$tmp"/$1.$p.* 2>/dev/null | awk '$1 == 4096 {print $5}' | median; }
  printf "4 KiB latency (us): dtrain %s, dtrain+tls %s, gloo %s, mpi %s, dtrain-mpi %s, dtrain-shm %s, mpi-shm %s\n\n" \
    "$(lat dtrain)" "$(lat tls)" "$(lat gloo)" "$(lat mpi)" "$(lat dmpi)" "$(lat shm)" "$(lat mpishm)"
done
