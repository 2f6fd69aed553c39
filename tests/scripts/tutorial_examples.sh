#!/bin/bash
# Smoke tests of the examples that follow the saving and sharding code paths of TensorFlow's multi-worker
# tutorial: each runs with two workers on loopback (a few steps of the MLP on Fashion-MNIST) and its files
# and output lines are checked; and of char_transformer, mirrored on two workers over a text file.
# usage: tutorial_examples.sh path/to/dtrain-launch path/to/examples/dir example [its arguments]
set -u
launch=$1; bin=$2; name=$3
dir=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$dir"' EXIT
fail() { echo "FAIL: $name: $*"; echo "== output"; cat "$dir/out.log"; [ -f "$dir/eval.log" ] && { echo "== evaluator"; cat "$dir/eval.log"; }; exit 1; }
has() { grep -qE -- "$1" "$dir/out.log" || fail "no line matching '$1'"; }
run2() { "$launch" -n 2 -- "$bin/$name" --model mlp --verbose 2 "$@" > "$dir/out.log" 2>&1 || fail "exit code $?"; }

case $name in
save_and_load)
  run2 --epochs 1 --steps-per-epoch 5 --dir "$dir/keras-model"
  has '^\[0\] chief worker:0 saved .*/keras-model/model.safetensors$'
  has '^\[1\] worker worker:1 saved .*/keras-model/workertemp_1/model.safetensors$'
  [ -f "$dir/keras-model/model.safetensors" ] || fail "the chief's model file is missing"
  [ -e "$dir/keras-model/workertemp_1" ] && fail "worker 1's temporary folder was not removed"
  has '^\[0\] loaded .* and trained it 2 more epochs'
  has '^\[1\] loaded .* and trained it 2 more epochs'
  ;;
checkpoint_manager)
  run2 --epochs 1 --steps-per-epoch 5 --dir "$dir/ckpt"
  has '^\[0\] chief worker:0 saved .*/ckpt/ckpt-1.safetensors$'
  has '^\[1\] worker worker:1 saved .*/workertemp_1/ckpt/ckpt-1.safetensors$'
  [ -e "$dir/workertemp_1" ] && fail "worker 1's temporary folder was not removed"
  grep -q 'model_checkpoint_path: "ckpt-1"' "$dir/ckpt/checkpoint" || fail "the checkpoint index does not name ckpt-1"
  has '^\[1\] restored ckpt-1.safetensors \(optimizer iterations 5\)$'
  # both workers end with the same test results (the model is mirrored)
  [ "$(grep -c '^\[[01]\] test_accuracy: 0\.[0-9]*$' "$dir/out.log")" = 2 ] || fail "not both workers reported test_accuracy"
  [ "$(grep '^\[[01]\] test_accuracy' "$dir/out.log" | sed 's/^\[.\] //' | sort -u | wc -l)" = 1 ] || fail "the workers disagree"
  ;;
backup_and_restore)
  run2 --epochs 4 --steps-per-epoch 10 --dir "$dir/backup"
  has '^\[0\] backup_and_restore: resuming at epoch 3, batch 0 from '
  has '^\[0\] backup_and_restore: resuming at epoch 3, batch 5 from '
  has '^\[0\] save_freq epoch: the second run trained epochs 3 to 4 \(2 of 4\)$'
  has '^\[0\] save_freq 5: the second run trained epochs 3 to 4 \(2 of 4\)$'
  # resumed from an epoch backup and from a mid-epoch one, training ends the same (as it would uninterrupted)
  [ "$(grep -A1 '^\[0\] Epoch 4/4' "$dir/out.log" | grep -o 'loss: [0-9.]*' | sort -u | wc -l)" = 1 ] || fail "the resumed runs end differently"
  [ -z "$(ls -A "$dir/backup" 2>/dev/null)" ] || fail "the backup was not deleted after training finished"
  ;;
sidecar_evaluator)
  . "$(dirname "$0")/ports.sh"
  w0=$(free_ports 3); w1=$((w0 + 1)); ev=$((w0 + 2))
  cluster="{\"cluster\": {\"worker\": [\"127.0.0.1:$w0\", \"127.0.0.1:$w1\"], \"evaluator\": [\"127.0.0.1:$ev\"]}"
  args="--model mlp --verbose 0 --epochs 3 --steps-per-epoch 10 --dir $dir/ckpt"
  TF_CONFIG="$cluster, \"task\": {\"type\": \"evaluator\", \"index\": 0}}" "$bin/$name" $args > "$dir/eval.log" 2>&1 &
  evaluator=$!
  for i in 0 1; do
    TF_CONFIG="$cluster, \"task\": {\"type\": \"worker\", \"index\": $i}}" "$bin/$name" $args >> "$dir/out.log" 2>&1 &
  done
  for p in $(jobs -p); do [ "$p" = "$evaluator" ] || wait "$p" || fail "a worker failed"; done
  wait "$evaluator" || fail "the evaluator failed (exit $?)"
  grep -qE '^sidecar_evaluator: ckpt-3.safetensors: .*accuracy: 0\.[0-9]+' "$dir/eval.log" || fail "the evaluator did not evaluate the last checkpoint"
  grep -qE '^evaluator: [1-3] checkpoint\(s\) evaluated$' "$dir/eval.log" || fail "no evaluator summary"
  ;;
auto_shard_off)
  run2 --epochs 2 --steps-per-epoch 5
  has '^\[0\] Epoch 2/2'
  [ "$(grep '^\[[01]\] test_accuracy' "$dir/out.log" | sed 's/^\[.\] //' | sort -u | wc -l)" = 1 ] || fail "the workers disagree"
  ;;
multi_worker_mnist)  # the tutorial with the arguments given after the name (--device gpu: two GPU workers)
  "$launch" -n 2 -- "$bin/$name" --model cnn --optimizer adam --verbose 2 --epochs 1 --steps-per-epoch 20 "${@:4}" \
    > "$dir/out.log" 2>&1
  rc=$?
  grep -q "no CUDA device" "$dir/out.log" && { echo "SKIP: no CUDA device"; exit 77; }
  [ $rc = 0 ] || fail "exit code $rc"
  has '^\[0\] Epoch 1/1'
  [ "$(grep -c '^\[[01]\] test_accuracy: 0\.[0-9]*$' "$dir/out.log")" = 2 ] || fail "not both workers reported test_accuracy"
  [ "$(grep '^\[[01]\] test_\(loss\|accuracy\)' "$dir/out.log" | sed 's/^\[.\] //' | sort -u | wc -l)" = 2 ] || fail "the workers disagree"
  ;;
char_transformer)  # its argument: a text file to train on
  "$launch" -n 2 -- "$bin/$name" --corpus "$4" --epochs 2 --steps-per-epoch 3 --sample-length 40 --verbose 2 \
    > "$dir/out.log" 2>&1 || fail "exit code $?"
  has '^\[0\] [0-9]+ characters, a vocabulary of [0-9]+$'
  has '^\[0\] 3/3 - .*loss: [0-9.]+ - perplexity: [0-9.]+ .*val_perplexity: [0-9.]+'
  # the model is mirrored: both workers end with the same validation figures
  [ "$(grep -c '^\[[01]\] validation: loss [0-9.]*, perplexity [0-9.]*, accuracy 0\.[0-9]*$' "$dir/out.log")" = 2 ] ||
    fail "not both workers reported the validation figures"
  [ "$(grep '^\[[01]\] validation' "$dir/out.log" | sed 's/^\[.\] //' | sort -u | wc -l)" = 1 ] || fail "the workers disagree"
  has '^\[[01]\] sampled text \(temperature 0\.80\):$'
  ;;
*) echo "unknown example $name"; exit 2 ;;
esac
echo "PASS: $name"
