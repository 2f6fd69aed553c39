"""Runs interop_run, whose TensorBoard callback profiles batches 2-4, and opens the XSpace it wrote
(log_dir/plugins/profile/<run>/worker_0.xplane.pb) with TensorBoard's profile plugin (the `xprof` package's
converter, which serves the plugin's trace viewer): the tools it offers include the trace viewer, whose
events are three train_step slices with each layer's forward and backward inside every one, on the named
host threads, the same intervals as the Chrome trace beside it.
usage: check_xplane.py <interop_run program>"""
import glob
import gzip
import json
import os
import subprocess
import sys
import tempfile

from xprof.convert import raw_to_tool_data

log_dir = tempfile.mkdtemp(prefix="dtrain-xplane-")
subprocess.run([sys.argv[1], log_dir], check=True)
found = glob.glob(os.path.join(log_dir, "plugins", "profile", "*", "worker_0.xplane.pb"))
if len(found) != 1:
    print(f"FAIL: expected one XSpace under {log_dir}/plugins/profile, found {found}")
    sys.exit(1)

failures = []
tools = raw_to_tool_data.xspace_to_tool_names(found)
if "trace_viewer" not in tools and "trace_viewer@" not in tools:
    failures.append(f"the plugin offers {tools} for the file, no trace viewer")
data, _ = raw_to_tool_data.xspace_to_tool_data(found, "trace_viewer", {})
view = json.loads(data)
events = [e for e in view["traceEvents"] if e.get("ph") == "X"]
threads = {e["tid"]: e["args"]["name"] for e in view["traceEvents"] if e.get("name") == "thread_name"}
processes = {e["args"]["name"] for e in view["traceEvents"] if e.get("name") == "process_name"}

steps = sorted((e for e in events if e["name"] == "train_step"), key=lambda e: e["ts"])
if len(steps) != 3:
    failures.append(f"{len(steps)} train_step events, expected 3 (batches 2-4)")
for layer in ("dense", "dense_1"):
    for cat in ("forward", "backward"):
        got = sorted((e for e in events if e["name"] == layer and e["args"].get("category") == cat), key=lambda e: e["ts"])
        if len(got) != len(steps):
            failures.append(f"{cat} {layer}: {len(got)} events for {len(steps)} steps")
        for s, g in zip(steps, got):
            if not (s["ts"] <= g["ts"] and g["ts"] + g["dur"] <= s["ts"] + s["dur"] + 1e-3):
                failures.append(f"{cat} {layer} at {g['ts']} is not inside its step [{s['ts']}, {s['ts'] + s['dur']}]")
if "main" not in threads.values():
    failures.append(f"thread names {threads}: no 'main'")
if "/host:CPU" not in processes:
    failures.append(f"process names {processes}: no '/host:CPU'")
# the same intervals as the Chrome trace dtrain wrote beside it (times there are from the trace's start)
with gzip.open(found[0].replace(".xplane.pb", ".trace.json.gz")) as f:
    chrome = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
if len(chrome) != len(events):
    failures.append(f"{len(events)} events in the trace viewer, {len(chrome)} in the Chrome trace")
elif steps:
    shift = steps[0]["ts"] - min(e["ts"] for e in chrome if e["name"] == "train_step")
    ours = sorted((e["name"], e["cat"], e["ts"] + shift, e["dur"]) for e in chrome)
    theirs = sorted((e["name"], e["args"].get("category"), e["ts"], e["dur"]) for e in events)
    # the viewer prints microseconds to the nanosecond
    differ = [(a, b) for a, b in zip(ours, theirs) if a[:2] != b[:2] or abs(a[2] - b[2]) > 3e-3 or abs(a[3] - b[3]) > 3e-3]
    if differ:
        failures.append(f"{len(differ)} intervals differ from the Chrome trace's, the first {differ[0]}")
if failures:
    print("FAIL:\n" + "\n".join(failures))
    sys.exit(1)
print(f"PASS: TensorBoard's profile plugin (xprof) reads the XSpace: tools {sorted(tools)}; {len(steps)} steps, "
      f"each layer's forward and backward inside them, {len(events)} events as in the Chrome trace, threads "
      f"{sorted(threads.values())}")
