"""Runs interop_run, whose TensorBoard callback profiles batches 2-4, and loads the trace it wrote
(log_dir/plugins/profile/<run>/worker_0.trace.json.gz) with Perfetto's trace processor (the `perfetto`
package; it fetches its trace_processor_shell binary on first use, or takes DTRAIN_TRACE_PROCESSOR):
three train_step slices, each layer's forward and backward inside every one, the named threads.
usage: check_trace.py <interop_run program>"""
import glob
import os
import subprocess
import sys
import tempfile

from perfetto.trace_processor import TraceProcessor, TraceProcessorConfig

log_dir = tempfile.mkdtemp(prefix="dtrain-trace-")
subprocess.run([sys.argv[1], log_dir], check=True)
found = glob.glob(os.path.join(log_dir, "plugins", "profile", "*", "worker_0.trace.json.gz"))
if len(found) != 1:
    print(f"FAIL: expected one trace under {log_dir}/plugins/profile, found {found}")
    sys.exit(1)
try:
    shell = os.environ.get("DTRAIN_TRACE_PROCESSOR")
    tp = TraceProcessor(trace=found[0], config=TraceProcessorConfig(bin_path=shell) if shell else TraceProcessorConfig())
except Exception as e:  # noqa: BLE001 (the binary could not be fetched or started)
    print(f"SKIP: Perfetto's trace processor is not available ({type(e).__name__}: {str(e)[:200]}); "
          "set DTRAIN_TRACE_PROCESSOR to a trace_processor_shell")
    sys.exit(77)

failures = []
rows = lambda q: list(tp.query(q))
steps = rows("select ts, dur from slice where name = 'train_step' order by ts")
if len(steps) != 3:
    failures.append(f"{len(steps)} train_step slices, expected 3 (batches 2-4)")
for layer in ("dense", "dense_1"):
    for cat in ("forward", "backward"):
        got = rows(f"select ts, dur from slice where name = '{layer}' and category = '{cat}' order by ts")
        if len(got) != len(steps):
            failures.append(f"{cat} {layer}: {len(got)} slices for {len(steps)} steps")
        for s, g in zip(steps, got):
            if not (s.ts <= g.ts and g.ts + g.dur <= s.ts + s.dur):
                failures.append(f"{cat} {layer} at {g.ts} is not inside its step [{s.ts}, {s.ts + s.dur}]")
threads = {r.name for r in rows("select name from thread where name is not null")}
if "main" not in threads:
    failures.append(f"thread names {threads}: no 'main'")
process = {r.name for r in rows("select name from process where name is not null")}
if "worker 0" not in process:
    failures.append(f"process names {process}: no 'worker 0'")
if failures:
    print("FAIL:\n" + "\n".join(failures))
    sys.exit(1)
print(f"PASS: Perfetto's trace processor reads the profile: {len(steps)} steps, each layer's forward and backward "
      f"inside them, threads {sorted(threads)}")
