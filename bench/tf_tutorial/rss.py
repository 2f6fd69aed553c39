"""Runs a command and reports its peak resident memory: `python rss.py CMD ARGS...` prints
`peak_rss_kib=N` (the child's VmHWM, from getrusage) on stderr after it exits, and exits with its status."""

import resource
import subprocess
import sys

code = subprocess.call(sys.argv[1:])
print(f"peak_rss_kib={resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}", file=sys.stderr, flush=True)
sys.exit(code)
