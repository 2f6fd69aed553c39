"""docs/deploy/kubeflow/tfjob.yaml as Kubeflow's training operator runs it, without Kubernetes: every
replica is a "pod" in its own network namespace with its own address, its service name in its /etc/hosts,
the manifest's command and environment, and the TF_CONFIG the operator gives it, verbatim (the chief,
the workers, "environment": "cloud"). The job must train to the end on every pod, the chief being rank 0
and the only one that logs progress. Exit 77 (skip) where network namespaces cannot be made.
usage: kubeflow_tfjob.py <tfjob.yaml> <directory of the built examples>"""
import os
import shutil
import subprocess
import sys
import tempfile

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netns  # noqa: E402

manifest, programs = sys.argv[1], sys.argv[2]
job = yaml.safe_load(open(manifest))

# What the training operator (kubeflow/training-operator, genTFConfigJSONStr: Go's json.Marshal of
# {cluster, task, environment}, the cluster's job names sorted, each replica <job>-<type>-<i>.<ns>.svc
# on its "tfjob-port") puts in TF_CONFIG for this manifest's job "mnist" in namespace "kubeflow".
cluster = ('{"chief":["mnist-chief-0.kubeflow.svc:2222"],'
           '"worker":["mnist-worker-0.kubeflow.svc:2222","mnist-worker-1.kubeflow.svc:2222"]}')
operator_tf_config = {
    ("chief", 0): '{"cluster":' + cluster + ',"task":{"type":"chief","index":0},"environment":"cloud"}',
    ("worker", 0): '{"cluster":' + cluster + ',"task":{"type":"worker","index":0},"environment":"cloud"}',
    ("worker", 1): '{"cluster":' + cluster + ',"task":{"type":"worker","index":1},"environment":"cloud"}',
}

# the manifest must describe that job, or the strings above are not what the operator would give it
name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
pods = []
for rtype, spec in job["spec"]["tfReplicaSpecs"].items():
    container = next(c for c in spec["template"]["spec"]["containers"] if c["name"] == "tensorflow")
    port = next(p["containerPort"] for p in container["ports"] if p["name"] == "tfjob-port")
    for i in range(spec["replicas"]):
        pods.append((rtype.lower(), i, f"{name}-{rtype.lower()}-{i}.{namespace}.svc", port, container))
if sorted((t, i) for t, i, *_ in pods) != sorted(operator_tf_config) or any(p[3] != 2222 for p in pods) or \
        (name, namespace) != ("mnist", "kubeflow"):
    sys.exit("FAIL: tfjob.yaml no longer describes job mnist (1 chief, 2 workers, port 2222) in namespace kubeflow: "
             "update the operator's TF_CONFIG strings in this test")

tmp = tempfile.mkdtemp(prefix="dtrain-tfjob-")
token = os.path.join(tmp, "token")
with open(token, "w") as f:
    f.write("k" * 64)
os.chmod(token, 0o400)
quick = {"--epochs": "2", "--steps-per-epoch": "5"}  # the manifest's run, shortened


def command(container, pod_dir):
    argv = list(container["command"])
    argv[0] = os.path.join(programs, os.path.basename(argv[0]))  # the image's /opt/dtrain/bin
    for i in range(1, len(argv) - 1):
        if argv[i] in quick:
            argv[i + 1] = quick[argv[i]]
    argv = [a.replace("/backup", os.path.join(pod_dir, "backup")) for a in argv]
    return argv + ["--model", "mlp", "--save-weights", os.path.join(pod_dir, "weights.safetensors")]


try:
    with netns.hosts(len(pods)) as h:
        hosts_file = os.path.join(tmp, "hosts")
        with open(hosts_file, "w") as f:
            f.write("127.0.0.1 localhost\n")
            for (_, _, svc, _, _), address in zip(pods, h.address):
                f.write(f"{address} {svc}\n")
        running = []
        for k, (rtype, i, svc, _, container) in enumerate(pods):
            pod_dir = os.path.join(tmp, f"{rtype}-{i}")
            os.makedirs(pod_dir)
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TF_CONFIG": operator_tf_config[(rtype, i)]}
            for e in container.get("env", []):
                env[e["name"]] = e["value"].replace("/var/run/dtrain/token", token)
            log = open(os.path.join(pod_dir, "log"), "w")
            running.append((rtype, i, pod_dir, h.run(k, command(container, pod_dir), env=env, hosts_file=hosts_file,
                                                     stdout=log, stderr=subprocess.STDOUT)))
        status = {(t, i): p.wait(timeout=240) for t, i, _, p in running}
except netns.Unavailable as e:
    print(f"SKIP: {e}")
    sys.exit(77)

failures = []
logs = {(t, i): open(os.path.join(d, "log")).read() for t, i, d, _ in running}
for key, code in status.items():
    if code != 0:
        failures.append(f"{key[0]}-{key[1]} exited {code}:\n{logs[key][-1500:]}")
chief = logs[("chief", 0)]
if "Epoch 2/2" not in chief or "rank 0 of 3 connected" not in chief:
    failures.append("the chief did not train two epochs as rank 0 of 3:\n" + chief[-1500:])
for key in (("worker", 0), ("worker", 1)):
    if "Epoch" in logs[key]:
        failures.append(f"worker-{key[1]} logged progress; only the chief does")
if not os.path.exists(os.path.join(tmp, "chief-0", "weights.safetensors")):
    failures.append("the chief saved no weights")
if failures:
    print("FAIL:\n" + "\n".join(failures) + f"\n(the pods' files: {tmp})")
    sys.exit(1)
print("chief: " + next(line for line in chief.splitlines() if "rank 0 of 3 connected" in line))
shutil.rmtree(tmp, ignore_errors=True)
print("PASS: tfjob.yaml trained on 3 pods with the operator's TF_CONFIG (" + ", ".join(h.address) + ")")
