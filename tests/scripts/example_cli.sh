#!/bin/bash
# The examples' command line (examples/mnist_setup.hpp, CLI11): every mistake is one line on stderr that
# names the flag, exit code 2, never a crash or a silent truncation; --help is the help on stdout, exit 0;
# --flag=value is accepted; running out of memory is a message and exit 1. With multi_worker_mnist too, its
# own flags' mistakes the same way.
# usage: example_cli.sh <single_worker_mnist> [<multi_worker_mnist>]
set -u
P=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
refuse() {  # refuse FLAG ARGS...: exit 2, one line naming FLAG, nothing on stdout
  local flag=$1
  shift
  timeout 60 "$P" "$@" > "$dir/out" 2> "$dir/err"
  local code=$?
  [ $code -eq 2 ] || fail "$* exited $code, expected 2: $(cat "$dir/err")"
  [ "$(wc -l < "$dir/err")" -eq 1 ] || fail "$*: not one line: $(cat "$dir/err")"
  grep -q -- "$flag" "$dir/err" || fail "$*: the message does not name $flag: $(cat "$dir/err")"
  grep -q "see --help" "$dir/err" || fail "$*: the message does not point at --help"
  [ ! -s "$dir/out" ] || fail "$* wrote to stdout"
  echo "refused: $* -> $(cat "$dir/err")"
}
refuse --batch-size --batch-size -1
refuse --batch-size --batch-size 0
refuse --save-freq --backup-dir "$dir/b" --save-freq 99999999999999999999
refuse --save-freq --save-freq 0
refuse --epochs --epochs 4294967297
refuse --epochs --epochs two
refuse --steps-per-epoch --steps-per-epoch -5
refuse --verbose --verbose 7
refuse --learning-rate --learning-rate nan
refuse --model --model vgg
refuse --bogus --bogus 1
refuse --epochs --epochs
touch "$dir/file"
refuse --save-weights --save-weights "$dir/file/w.safetensors"  # a folder that cannot exist: before training
# memory that cannot be had (a batch of 60,000 images through the CNN needs over 5 GB): a message and exit
# 1, which no restart fixes, not an uncaught exception's SIGABRT (134, which orchestrators retry)
(ulimit -v 4000000 && exec timeout 120 "$P" --model cnn --batch-size 60000 --epochs 1 --steps-per-epoch 1 \
  --verbose 0) > "$dir/out" 2> "$dir/err"
code=$?
[ $code -eq 1 ] || fail "out of memory: exited $code, expected 1: $(cat "$dir/err")"
grep -q "^error: std::bad_alloc$" "$dir/err" || fail "out of memory: no message: $(cat "$dir/err")"
echo "out of memory: exit 1, $(cat "$dir/err")"
"$P" --help > "$dir/out" 2> "$dir/err" || fail "--help exited $?"
grep -q -- "--steps-per-epoch" "$dir/out" || fail "--help does not list the options"
[ ! -s "$dir/err" ] || fail "--help wrote to stderr"
timeout 300 "$P" --epochs=1 --steps-per-epoch=2 --verbose=0 --model=mlp > "$dir/out" 2>&1 || fail "--flag=value: $(cat "$dir/out")"
grep -q "test_accuracy" "$dir/out" || fail "--flag=value did not train: $(cat "$dir/out")"
refuse --dtype-policy --dtype-policy bfloat16
timeout 300 "$P" --epochs=1 --steps-per-epoch=2 --verbose=0 --model=cnn --dtype-policy mixed_bfloat16 > "$dir/out" 2>&1 ||
  fail "--dtype-policy mixed_bfloat16: $(cat "$dir/out")"
grep -q "test_accuracy" "$dir/out" || fail "--dtype-policy mixed_bfloat16 did not train: $(cat "$dir/out")"
if [ -n "${2:-}" ]; then
  P=$2
  refuse --implementation --implementation mpi
  refuse --gradient-compression --gradient-compression int8
  refuse --device --device tpu
fi
echo "PASS: example command line"
