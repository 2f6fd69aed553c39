# Sourced by the test scripts that start jobs on loopback.
# free_ports N: the first of N consecutive TCP ports on 127.0.0.1 that nothing holds, chosen below the
# kernel's ephemeral range, so that no outgoing connection (of this job or of a test running beside it)
# can take one of them before the job listens there.
free_ports() {
  /usr/bin/python3 - "$1" <<'PY'
import random, socket, sys
n = int(sys.argv[1])
with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
    ephemeral = int(f.read().split()[0])
lo, hi = (10000, ephemeral - n) if ephemeral - n > 12000 else (ephemeral // 2 + 32768, 65535 - n)
def free(p):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", p))
            return True
        except OSError:
            return False
for _ in range(1000):
    b = random.randrange(lo, hi)
    if all(free(b + i) for i in range(n)):
        print(b)
        sys.exit(0)
sys.exit("free_ports: no %d free consecutive ports on 127.0.0.1" % n)
PY
}
