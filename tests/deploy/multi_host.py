"""Training across 4 hosts with real addresses: each worker in its own network namespace (tests/deploy/
netns.py), TF_CONFIG naming the hosts' addresses, a job token as a real cluster needs.
  1. the job equals one worker with the global batch (SGD, 2 epochs; equal to float rounding);
  2. host 3 is cut off after the first backup (its link down): every other worker exits 138 within the
     collective timeout naming the lost peer; run again (the link back up), the job resumes from the
     chief's backup and ends with the weights of an uninterrupted run, bitwise;
  3. over links that delay every frame 0.5 ms and lose 1 % of them (netrelay, tests/deploy/netrelay.cpp,
     in place of the bridge) the job of 1. ends with the same weights, bitwise.
Exit 77 (skip) where namespaces cannot be made.
usage: multi_host.py <multi_worker_mnist> <single_worker_mnist> <netrelay>"""
import glob
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netns  # noqa: E402

multi, single, relay = sys.argv[1], sys.argv[2], sys.argv[3]
N, PORT = 4, 29500
args = ["--model", "mlp", "--optimizer", "sgd", "--learning-rate", "0.05", "--epochs", "2", "--steps-per-epoch", "30",
        "--seed", "5", "--verbose", "2"]
tmp = tempfile.mkdtemp(prefix="dtrain-hosts-")


def load(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    header = json.loads(b[8:8 + n])
    return {k: struct.unpack(f"<{(v['data_offsets'][1] - v['data_offsets'][0]) // 4}f",
                             b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            for k, v in header.items() if k != "__metadata__"}


def off_by_more_than_rounding(a, b):
    """Values of a and b (safetensors files) farther apart than |a - b| <= 1e-5 + 1e-4 |b|."""
    wa, wb = load(a), load(b)
    if wa.keys() != wb.keys():
        return ["tensor names differ"]
    return [f"{k}[{i}]: {x} vs {y}" for k in wa for i, (x, y) in enumerate(zip(wa[k], wb[k]))
            if abs(x - y) > 1e-5 + 1e-4 * abs(y)]


def job(h, name, extra, watch=None):
    """Runs the 4 workers; watch(procs) may act while they run. Returns (exit codes, logs)."""
    cluster = [f"{a}:{PORT}" for a in h.address]
    procs, logs = [], []
    for i in range(N):
        # DTRAIN_SHM=0: the namespaces share this machine's /dev/shm, which separate hosts do not
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "DTRAIN_JOB_TOKEN": "t" * 64, "DTRAIN_SHM": "0",
               "TF_CONFIG": json.dumps({"cluster": {"worker": cluster}, "task": {"type": "worker", "index": i}})}
        log = os.path.join(tmp, f"{name}.{i}.log")
        logs.append(log)
        procs.append(h.run(i, [multi, *args, *extra], env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT))
    if watch:
        watch(procs)
    codes = [p.wait(timeout=300) for p in procs]
    return codes, [open(log).read() for log in logs]


failures = []
try:
    with netns.hosts(N) as h:
        # 1. four hosts train like one worker with the global batch
        ref = os.path.join(tmp, "four.safetensors")
        codes, logs = job(h, "four", ["--batch-size", "16", "--save-weights", ref])
        if codes != [0] * N:
            failures.append(f"the 4-host job exited {codes}:\n{logs[0][-1500:]}")
        one = os.path.join(tmp, "one.safetensors")
        subprocess.run([single, *args, "--batch-size", "64", "--save-weights", one], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if not failures:
            off = off_by_more_than_rounding(ref, one)
            if off:
                failures.append(f"4 hosts differ from one worker beyond rounding in {len(off)} values, e.g. {off[:3]}")
            else:
                print(f"1. 4 hosts ({', '.join(h.address)}) train like one worker with the global batch "
                      f"({sum(len(v) for v in load(one).values())} weights within rounding)")

        # 2. host 3 cut off after the first backup, then the job run again
        backup = os.path.join(tmp, "backup")
        cut = ["--batch-size", "16", "--backup-dir", backup, "--save-freq", "5"]
        uninterrupted = os.path.join(tmp, "uninterrupted.safetensors")
        codes, logs = job(h, "plain", cut + ["--save-weights", uninterrupted])
        shutil.rmtree(backup, ignore_errors=True)
        when = {}

        def cut_host_3(procs):
            deadline = time.time() + 120
            while not glob.glob(os.path.join(backup, "ckpt-*.safetensors")) and time.time() < deadline:
                time.sleep(0.05)
            subprocess.run(["ip", "link", "set", h.links[3], "down"], check=True)
            when["cut"] = time.time()
            for p in procs[:3]:
                p.wait(timeout=200)
            when["others_out"] = time.time()

        codes, logs = job(h, "cut", cut, watch=cut_host_3)
        subprocess.run(["ip", "link", "set", h.links[3], "up"], check=True)
        if codes[:3] != [138] * 3:
            failures.append(f"after host 3 was cut off the others exited {codes[:3]}, not 138:\n{logs[0][-1500:]}")
        lost = f"rank 3 ({h.address[3]}:{PORT})"
        why = [next((x.strip() for x in log.splitlines() if lost in x and "connected" not in x), None) for log in logs[:3]]
        named = [i for i in range(3) if why[i]]
        if len(named) != 3:
            failures.append(f"workers {sorted(set(range(3)) - set(named))} did not name the lost peer (rank 3, "
                            f"{h.address[3]}:{PORT}):\n{logs[0][-1500:]}")
        resumed = os.path.join(tmp, "resumed.safetensors")
        codes2, logs2 = job(h, "resume", cut + ["--save-weights", resumed])
        if codes2 != [0] * N or "backup_and_restore: resuming at epoch" not in logs2[0]:
            failures.append(f"the restarted job exited {codes2} or did not resume:\n{logs2[0][-1500:]}")
        elif open(resumed, "rb").read() != open(uninterrupted, "rb").read():
            failures.append("the resumed job ended with other weights than the uninterrupted one")
        if not failures:
            print(f"2. host 3 cut off: hosts 0-2 exited 138 {when['others_out'] - when['cut']:.1f} s later, saying")
            for i in range(3):
                print(f"     worker {i}: {why[i]}")
            print(f"   rerun: {next(x for x in logs2[0].splitlines() if 'resuming at epoch' in x).strip()}, "
                  "same weights as uninterrupted")
    # 3. the job of 1. over lossy, slow links
    if not failures:
        with netns.hosts(N, relay=netns.Relay(relay, delay_us=500, loss=0.01, seed=3)) as h:
            lossy = os.path.join(tmp, "lossy.safetensors")
            start = time.time()
            codes, logs = job(h, "lossy", ["--batch-size", "16", "--save-weights", lossy])
            took = time.time() - start
        if codes != [0] * N:
            failures.append(f"the job over lossy links exited {codes}:\n{logs[0][-1500:]}")
        elif open(lossy, "rb").read() != open(ref, "rb").read():
            failures.append("over lossy links the job ended with other weights than over the bridge")
        else:
            print(f"3. links with 0.5 ms delay and 1 % loss ({h.relay_stats.removeprefix('netrelay: ')}): the job took "
                  f"{took:.1f} s and ended with the same weights as over the bridge, bitwise")
except netns.Unavailable as e:
    print(f"SKIP: {e}")
    sys.exit(77)

if failures:
    print("FAIL:\n" + "\n".join(failures) + f"\n(logs in {tmp})")
    sys.exit(1)
shutil.rmtree(tmp, ignore_errors=True)
print("PASS: 4 hosts")
