#!/bin/bash
# Two builds of allreduce_perf (TCP, -s 0) against each other and Open MPI TCP: ROUNDS rounds that run
# Open MPI, OLD and NEW one after the other for each rank count, so that all three see the same machine
# load; prints per size the median time (us) and busbw (GB/s) of each, and busbw ratios against Open MPI.
#   bench/ab_allreduce.sh OLD_BUILD NEW_BUILD [ROUNDS (5)] [RANKS... (2 3 4)]
set -eu
old=$1/bench/allreduce_perf new=$2/bench/allreduce_perf mpi=$2/bench/mpi_allreduce
rounds=${3:-5}
shift $(($# < 3 ? $# : 3))
ranks=${*:-2 3 4}
args="-b 4K -e 64M -f 4 -n 20 -w 5"
have_mpi=0; [ -x "$mpi" ] && command -v mpirun > /dev/null && have_mpi=1
t=$(mktemp -d); trap 'rm -rf "$t"' EXIT
for r in $(seq "$rounds"); do
  for p in $ranks; do
    [ $have_mpi = 1 ] && mpirun --allow-run-as-root --oversubscribe --mca btl tcp,self -np "$p" "$mpi" $args 2>/dev/null |
      grep -v '^#' > "$t/mpi.$p.$r"
    "$old" $args -c 0 -p "$p" -s 0 | grep -v '^#' > "$t/old.$p.$r"
    "$new" $args -c 0 -p "$p" -s 0 | grep -v '^#' > "$t/new.$p.$r"
  done
done
median() { sort -g | awk '{v[NR]=$1} END {print (NR ? v[int((NR+1)/2)] : "n/a")}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b == "n/a" || b == 0) print "n/a"; else printf "%.2f", a / b }'; }
for p in $ranks; do
  echo "# all_reduce, $p ranks on loopback (TCP): time (us) and busbw (GB/s), medians of $rounds rounds"
  printf "%10s %9s %9s %9s %8s %8s %8s %8s %8s\n" size mpi_us old_us new_us mpi_bw old_bw new_bw old/mpi new/mpi
  for s in $(awk '{print $1}' "$t/new.$p.1"); do
    c() { cat "$t"/$1.$p.* 2>/dev/null | awk -v s="$s" -v c="$2" '$1 == s {print $c}' | median; }
    mb=$(c mpi 7) ob=$(c old 7) nb=$(c new 7)
    printf "%10s %9s %9s %9s %8s %8s %8s %8s %8s\n" "$s" "$(c mpi 5)" "$(c old 5)" "$(c new 5)" "$mb" "$ob" "$nb" \
      "$(ratio "$ob" "$mb")" "$(ratio "$nb" "$mb")"
  done
done
