"""A parameter server job across 5 hosts with real addresses (network namespaces, tests/deploy/netns.py):
the chief on host 0, 2 workers on hosts 1-2, 2 ps tasks on hosts 3-4, TF_CONFIG naming the hosts'
addresses and a job token.
  1. Model.fit (parameter_server_mnist) trains: the chief reports the test accuracy, every task exits 0;
  2. the custom loop with a cluster_coordinator (parameter_server_custom_loop) the same;
  3. host 4 (ps:1) is cut off mid-training (its link down, so nothing closes its connections): the chief
     exits 138 within the liveness timeout (10 s) and a little more, naming ps:1, and so do the workers.
Exit 77 (skip) where namespaces cannot be made.
usage: ps_hosts.py <parameter_server_mnist> <parameter_server_custom_loop>"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netns  # noqa: E402

fit_program, loop_program = sys.argv[1], sys.argv[2]
PORT = 29600
ROLES = [("chief", 0), ("worker", 0), ("worker", 1), ("ps", 0), ("ps", 1)]
tmp = tempfile.mkdtemp(prefix="dtrain-ps-hosts-")


def job(h, program, name, args, watch=None):
    """Runs the 5 tasks; watch(procs, logs) may act while they run. Returns (exit codes, logs)."""
    address = [f"{a}:{PORT}" for a in h.address]
    cluster = {"chief": address[0:1], "worker": address[1:3], "ps": address[3:5]}
    procs, logs = [], []
    for i, (kind, index) in enumerate(ROLES):
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "DTRAIN_JOB_TOKEN": "t" * 64, "DTRAIN_NUM_THREADS": "1",
               "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": kind, "index": index}})}
        log = os.path.join(tmp, f"{name}.{kind}{index}.log")
        logs.append(log)
        procs.append(h.run(i, [program, *args], env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT))
    if watch:
        watch(procs, logs)
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=300))
        except subprocess.TimeoutExpired:
            p.kill()
            codes.append(p.wait())
    return codes, [open(log).read() for log in logs]


failures = []
try:
    with netns.hosts(len(ROLES)) as h:
        # 1. and 2.: both APIs train across the hosts
        for program, name in ((fit_program, "fit"), (loop_program, "custom loop")):
            codes, logs = job(h, program, name.replace(" ", "_"), ["--model", "mlp", "--epochs", "2",
                                                                   "--steps-per-epoch", "60"])
            accuracy = next((x.strip() for x in logs[0].splitlines() if x.startswith("test_accuracy: ")), None)
            if codes != [0] * len(ROLES) or not accuracy:
                failures.append(f"the {name} job exited {codes}:\n{logs[0][-1500:]}")
            else:
                print(f"{1 if name == 'fit' else 2}. {name}: chief on {h.address[0]}, workers on {h.address[1]} and "
                      f"{h.address[2]}, ps tasks on {h.address[3]} and {h.address[4]}: {accuracy}, every task exited 0")

        # 3. host 4 cut off mid-training
        when = {}

        def cut_ps_1(procs, logs):
            deadline = time.time() + 120
            while "Epoch 2/" not in open(logs[0]).read() and time.time() < deadline:
                time.sleep(0.05)
            subprocess.run(["ip", "link", "set", h.links[4], "down"], check=True)
            when["cut"] = time.time()
            procs[0].wait(timeout=200)
            when["chief_out"] = time.time()
            for p in procs[1:3]:
                p.wait(timeout=200)
            when["workers_out"] = time.time()
            procs[4].kill()  # cut off, it would wait for its peers far longer

        codes, logs = job(h, fit_program, "cut", ["--model", "mlp", "--epochs", "50", "--steps-per-epoch", "200",
                                                  "--verbose", "2"], watch=cut_ps_1)
        subprocess.run(["ip", "link", "set", h.links[4], "up"], check=True)
        named = next((x.strip() for x in logs[0].splitlines() if "ps:1" in x and "error" in x), None)
        if codes[:3] != [138] * 3:
            failures.append(f"after ps:1's host was cut off the chief and workers exited {codes[:3]}, not 138:\n"
                            f"{logs[0][-1500:]}")
        elif not named:
            failures.append(f"the chief did not name ps:1:\n{logs[0][-1500:]}")
        elif when["chief_out"] - when["cut"] > 30:
            failures.append(f"the chief took {when['chief_out'] - when['cut']:.1f} s to stop")
        else:
            print(f"3. ps:1's host cut off: the chief exited 138 {when['chief_out'] - when['cut']:.1f} s later "
                  f"(the workers {when['workers_out'] - when['cut']:.1f} s), saying\n     {named}")
except netns.Unavailable as e:
    print(f"SKIP: {e}")
    sys.exit(77)

if failures:
    print("FAIL:\n" + "\n".join(failures) + f"\n(logs in {tmp})")
    sys.exit(1)
shutil.rmtree(tmp, ignore_errors=True)
print("PASS: parameter server across 5 hosts")
