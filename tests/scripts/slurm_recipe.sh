#!/bin/bash
# docs/deploy/slurm/train.sbatch, run as sbatch would run it but with tests/deploy/srun standing in for
# Slurm's srun (two tasks on this host, Slurm's variables set per task):
#   1. a job trains to the end;
#   2. task 1 is killed after the first backup: the script restarts the step, the workers resume from
#      the backup and end with the weights of job 1, bitwise;
#   3. a usage error (exit status 2) is not retried.
# usage: slurm_recipe.sh <multi_worker_mnist> <dtrain source dir>
set -u
P=$1; src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; tail -n 25 "$tmp"/*.log; exit 1; }
export PATH="$src/tests/deploy:$PATH" SLURM_NTASKS=2 DTRAIN_PROGRAM=$P
. "$(dirname "$0")/ports.sh"
export DTRAIN_PORT=$(free_ports 2)
script=$src/docs/deploy/slurm/train.sbatch
args=(--model cnn --optimizer adam --epochs 2 --steps-per-epoch 20 --save-freq 5 --verbose 2 --seed 3)

DTRAIN_BACKUP_DIR=$tmp/b1 SLURM_JOB_ID=1 bash "$script" "${args[@]}" --save-weights "$tmp/one.safetensors" > "$tmp/one.log" 2>&1 ||
  fail "the job failed"
grep -q "Epoch 2/2" "$tmp/one.log" || fail "the job did not train two epochs"
grep -q "restart" "$tmp/one.log" && fail "a job without failures was restarted"
echo "1. trained, no restart: $(grep -m1 test_accuracy "$tmp/one.log")"

FAKE_SRUN_KILL_RANK=1 FAKE_SRUN_KILL_WHEN="$tmp/b2/ckpt-*.safetensors" FAKE_SRUN_STATE=$tmp/killed \
  DTRAIN_BACKUP_DIR=$tmp/b2 SLURM_JOB_ID=2 bash "$script" "${args[@]}" --save-weights "$tmp/two.safetensors" > "$tmp/two.log" 2>&1 ||
  fail "the job with a killed task did not finish"
[ -e "$tmp/killed" ] || fail "no task was killed"
grep -Eq "srun exited 13[78] \(a worker failed or was killed\)" "$tmp/two.log" || fail "the script did not see the failed step"
grep -q "restart 1 of 3" "$tmp/two.log" || fail "the script did not restart the step"
grep -q "backup_and_restore: resuming at epoch" "$tmp/two.log" || fail "the workers did not resume from the backup"
cmp -s "$tmp/one.safetensors" "$tmp/two.safetensors" || fail "the restarted job ended with other weights"
echo "2. task 1 killed, step restarted: $(grep -m1 'resuming at epoch' "$tmp/two.log" | sed 's/.*resuming/resuming/'); same weights"

DTRAIN_BACKUP_DIR=$tmp/b3 SLURM_JOB_ID=3 bash "$script" --batch-size 0 > "$tmp/three.log" 2>&1
status=$?
[ $status = 2 ] || fail "a usage error ended the job with status $status, not 2"
grep -q "not retrying" "$tmp/three.log" || fail "the script did not say it does not retry"
grep -q "restart 1" "$tmp/three.log" && fail "a usage error was retried"
echo "3. usage error: status 2, not retried"
echo "PASS: slurm recipe"
