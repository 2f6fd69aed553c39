"""Hosts for multi-host tests on one machine: network namespaces joined by veth pairs to a bridge, each
with its own address and, optionally, its own /etc/hosts (bind-mounted in a private mount namespace for
the commands run there). Everything is made under names unique to this process and removed on exit.

    with netns.hosts(3) as h:             # h.address[i]: "10.201.x.(i+1)"
        h.run(i, argv, env=..., hosts_file=...)   # a Popen in host i

Links with delay or loss (for kernels whose tc has no netem): hosts(n, relay=Relay(binary, delay_us, loss))
joins the veth pairs through netrelay (tests/deploy/netrelay.cpp), a user-space switch that delays every
frame by delay_us and drops each with probability loss, instead of the bridge. Those links use 9000-byte
frames; segmentation offload passes through the relay (up to 64 KiB per frame, what keeps a user-space
switch at link rate on a small machine), except with loss, where each frame is one packet
(gso_max_segs 1), so that loss is per packet.

Raises netns.Unavailable (with the reason) where namespaces cannot be made (not root, no CAP_NET_ADMIN)."""
import contextlib
import os
import subprocess


class Unavailable(Exception):
    pass


def _ip(*args, check=True):
    return subprocess.run(["ip", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=check)


class Relay:
    def __init__(self, binary, delay_us=0, loss=0.0, seed=1):
        self.binary, self.delay_us, self.loss, self.seed = binary, delay_us, loss, seed


class Hosts:
    def __init__(self, n, relay=None):
        self.relay = relay
        self.relay_proc = None
        tag = os.getpid() % 100000
        self.prefix = f"dt{tag}"
        self.subnet = f"10.201.{tag % 250}"
        self.names = [f"{self.prefix}n{i}" for i in range(n)]
        self.address = [f"{self.subnet}.{i + 1}" for i in range(n)]
        self.bridge = f"{self.prefix}br"
        self.links = [f"{self.prefix}v{i}" for i in range(n)]  # the host side of each veth pair

    def up(self):
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
        except (subprocess.CalledProcessError, FileNotFoundError) as e:
            why = e.stderr.strip() if isinstance(e, subprocess.CalledProcessError) else str(e)
            raise Unavailable(f"cannot make a bridge ({why}): not root, or no CAP_NET_ADMIN")
        _ip("link", "set", self.bridge, "up")
        for name, link, address in zip(self.names, self.links, self.address):
            _ip("netns", "add", name)
            _ip("link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", name)
            if self.relay:  # no bridge: the relay joins the links
                _ip("link", "set", link, "mtu", "9000", "up")
                _ip("-n", name, "link", "set", "eth0", "mtu", "9000")
                if self.relay.loss > 0:  # one packet per frame, so that a dropped frame is one lost packet
                    _ip("-n", name, "link", "set", "eth0", "gso_max_segs", "1")
            else:
                _ip("link", "set", link, "master", self.bridge, "up")
            _ip("-n", name, "addr", "add", f"{address}/24", "dev", "eth0")
            _ip("-n", name, "link", "set", "eth0", "up")
            _ip("-n", name, "link", "set", "lo", "up")
        if self.relay:
            r = self.relay
            self.relay_proc = subprocess.Popen([r.binary, "--delay-us", str(r.delay_us), "--loss", str(r.loss),
                                                "--seed", str(r.seed), *self.links],
                                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            first = self.relay_proc.stdout.readline()
            if not first.startswith("netrelay:") or self.relay_proc.poll() is not None:
                raise Unavailable(f"netrelay did not start: {first.strip()}")

    def down(self):
        if self.relay_proc:
            self.relay_proc.terminate()
            try:
                self.relay_stats = self.relay_proc.communicate(timeout=10)[0].strip()
            except subprocess.TimeoutExpired:
                self.relay_proc.kill()
        for link in self.links:  # synchronously (a namespace's deletion frees its links later)
            _ip("link", "del", link, check=False)
        for name in self.names:
            _ip("netns", "del", name, check=False)
        _ip("link", "del", self.bridge, check=False)

    def run(self, i, argv, env=None, hosts_file=None, **popen):
        """Starts argv in host i (with hosts_file as its /etc/hosts when given)."""
        wrap = ["ip", "netns", "exec", self.names[i]]
        if hosts_file:
            wrap += ["unshare", "--mount", "sh", "-c", 'mount --bind "$0" /etc/hosts && exec "$@"', hosts_file]
        return subprocess.Popen(wrap + list(argv), env=env, **popen)


@contextlib.contextmanager
def hosts(n, relay=None):
    h = Hosts(n, relay)
    try:
        h.up()
        yield h
    finally:
        h.down()
