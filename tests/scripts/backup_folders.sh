#!/bin/bash
# Backup folders a cluster really has: a backup_dir that is a mount point (a Kubernetes volume) cannot
# be removed when training ends, so it is emptied and the final --save-weights still runs (exit 0); a
# backup_dir under a read-only file system is an error naming the folder before any training (exit 1).
# Runs single_worker_mnist in a private mount namespace (unshare -m) with tmpfs mounts; skipped (77)
# where mount namespaces cannot be made.
# usage: backup_folders.sh <single_worker_mnist>
set -u
P=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir -p "$dir/volume" "$dir/ro"
if ! unshare -m sh -c "mount -t tmpfs none '$dir/volume'" 2> /dev/null; then
  echo "SKIPPED: cannot make a mount namespace here (unshare -m and mount need CAP_SYS_ADMIN)"
  exit 77
fi
export P D="$dir"
unshare -m bash -c '
  fail() { echo "FAIL: $*"; exit 1; }
  mount -t tmpfs none "$D/volume" && mount -t tmpfs -o ro none "$D/ro" || fail "mount"
  "$P" --model mlp --epochs 1 --steps-per-epoch 30 --save-freq 10 --verbose 0 --backup-dir "$D/volume" \
    --save-weights "$D/w.safetensors" > "$D/out" 2>&1 || fail "a mount point as backup_dir: exit $?: $(cat "$D/out")"
  [ -s "$D/w.safetensors" ] || fail "no final weights"
  [ -z "$(ls -A "$D/volume")" ] || fail "the mount point was not emptied: $(ls -A "$D/volume")"
  grep -q WARNING "$D/out" && fail "a warning although the folder was emptied: $(cat "$D/out")"
  echo "a mount point: emptied, weights saved"
  "$P" --model mlp --epochs 1 --steps-per-epoch 30 --verbose 0 --backup-dir "$D/ro/backup" > "$D/out" 2>&1
  code=$?
  [ $code -eq 1 ] || fail "a read-only backup_dir: exit $code, expected 1: $(cat "$D/out")"
  grep -q "cannot write backups to $D/ro/backup (Read-only file system)" "$D/out" || fail "no clear error: $(cat "$D/out")"
  grep -q "test_accuracy" "$D/out" && fail "it trained first"
  echo "a read-only file system: $(cat "$D/out")"
' || exit 1
echo "PASS: backup folders"
