"""Helpers the load scripts in bench/ share: ports, readiness, CPU accounting, nginx, cleanup.

Everything is on 127.0.0.1, and only processes a script started are stopped, by PID.
"""

import json
import os
import re
import shutil
import signal
import statistics
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TICK = os.sysconf("SC_CLK_TCK")


def robotsgate_config(work, name, robotsgate, pingora=""):
    """Writes `{work}/{name}.yaml` for a benchmark run and returns its path: Pingora's keys
    (one worker thread, its own pid file and upgrade socket, no shutdown grace) plus the
    lines of `pingora`, then `robotsgate:` followed by the (indented) lines of `robotsgate`."""
    path = f"{work}/{name}.yaml"
    with open(path, "w") as f:
        f.write(f"version: 1\nthreads: 1\npid_file: {work}/{name}.pid\nupgrade_sock: {work}/{name}.sock\n"
                f"grace_period_seconds: 0\ngraceful_shutdown_timeout_seconds: 1\n{pingora}"
                f"robotsgate:\n{robotsgate}")
    return path


# Keep-alive connections to origins, enough for every benchmark connection.
POOL = "upstream_keepalive_pool_size: 1024\n"

# robotsgate's pacing off, for scripts that measure what a request costs: one origin and
# many connections would make the in-flight limit (2 per origin) the measure, and
# adaptive pacing would judge a loopback origin answering in well under a millisecond
# by response times that include this host's stalls (paired loads keep a proxy off the
# CPU for tens of milliseconds; robotsgate takes off the time a response sat unread in
# its socket, not a stall before the request was written). bench/pacing_load.py
# measures pacing.
UNPACED = "  pacing:\n    max_in_flight: 0\n    adaptive:\n      enabled: false\n"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"nothing listening on {port}")


def cpu_split(pid):
    """(utime, stime) of the whole process (all threads) in seconds, from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / TICK, int(fields[12]) / TICK


def cpu_seconds(pid):
    """utime + stime of the whole process (all threads), from /proc."""
    return sum(cpu_split(pid))


def switches(pid):
    """(voluntary, involuntary) context switches of all the process's threads, from /proc."""
    counts = [0, 0]
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/status") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches:"):
                        counts[0] += int(line.split()[1])
                    elif line.startswith("nonvoluntary_ctxt_switches:"):
                        counts[1] += int(line.split()[1])
        except FileNotFoundError:  # a thread that ended since the listing
            pass
    return tuple(counts)


def prepare(name, packages, examples=()):
    """A benchmark's start: the Debian packages of `packages` (`{executable: package}`)
    installed when missing, robotsgate (and the `examples`) built for release, and a new
    work directory `robotsgate-{name}-*` that nginx's unprivileged workers can read: its
    path."""
    ensure_packages(packages)
    build = ["cargo", "build", "--release", "--quiet", "--bin", "robotsgate"]
    for example in examples:
        build += ["--example", example]
    subprocess.run(build, cwd=ROOT, check=True)
    work = tempfile.mkdtemp(prefix=f"robotsgate-{name}-")
    os.chmod(work, 0o755)
    return work


def robotsgate_binary(profile):
    """This build's robotsgate in Cargo profile `profile` (built first unless it is the
    release profile `prepare` built; `dist`: as it ships): its path."""
    if profile != "release":
        subprocess.run(["cargo", "build", "--profile", profile, "--locked", "--quiet",
                        "--bin", "robotsgate"], cwd=ROOT, check=True)
    return f"{ROOT}/target/{profile}/robotsgate"


def ensure_packages(commands):
    """Installs the Debian packages of `{executable: package}` whose executable is missing."""
    missing = [pkg for exe, pkg in commands.items() if not shutil.which(exe) and not os.path.exists(f"/usr/sbin/{exe}")]
    if missing:
        subprocess.run(["apt-get", "update", "-qq"], check=True)
        subprocess.run(["apt-get", "install", "-y", "-qq", *missing], check=True,
                       env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})


def nginx_binary():
    return shutil.which("nginx") or "/usr/sbin/nginx"


def page_origin(work, started, prefix=()):
    """Starts nginx (`prefix` before its command, e.g. `taskset -c 0`) serving the
    benchmark origin from `{work}/www` and returns it as `127.0.0.1:port`: a page of
    1 KiB, `/index.html`, and the large robots.txt without its Crawl-delay lines (the
    per-request cost of cached decisions, not pacing: bench/pacing_load.py measures
    that), with usage preferences in its `*` group (parsed by every proxy, judged only
    by one that declares purposes)."""
    port = free_port()
    os.makedirs(f"{work}/www")
    with open(f"{work}/www/index.html", "w") as f:
        # 1,024 octets: 12 + 997 + 15.
        f.write("<html><body>" + "x" * 997 + "</body></html>\n")
    rules = open(f"{ROOT}/tests/data/large_robots.txt").read().splitlines()
    rules = [l for l in rules if not l.lower().startswith("crawl-delay")]
    star = rules.index("User-agent: *")
    rules[star + 1:star + 1] = ["Content-Signal: search=yes, ai-train=no", "Content-Usage: /index train-ai=y"]
    with open(f"{work}/www/robots.txt", "w") as f:
        f.write("\n".join(rules) + "\n")
    with open(f"{work}/nginx.conf", "w") as f:
        f.write(f"daemon off; worker_processes 1; pid {work}/nginx.pid; error_log {work}/nginx.err;\n"
                "events { worker_connections 4096; }\n"
                "http { access_log off; keepalive_requests 1000000;\n"
                f"  server {{ listen 127.0.0.1:{port}; root {work}/www; }} }}\n")
    started.append(subprocess.Popen([*prefix, nginx_binary(), "-c", f"{work}/nginx.conf", "-p", work]))
    wait_port(port)
    return f"127.0.0.1:{port}"


def stop(processes):
    """SIGINT to each process this script started (newest first), SIGKILL if it lingers."""
    for proc in reversed(processes):
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()


def leaf_certificate(work, name, ca):
    """{work}/{name}.pem and .key: a P-256 server certificate for 127.0.0.1, 127.0.0.2 and
    localhost, signed by {work}/{ca}.pem (made by `robotsgate ca init`), for two days."""
    with open(f"{work}/{name}.cnf", "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,IP:127.0.0.2,DNS:localhost\nextendedKeyUsage=serverAuth\n")
    subprocess.run(["openssl", "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-keyout", f"{work}/{name}.key", "-out", f"{work}/{name}.csr", "-subj", "/CN=127.0.0.1"],
                   check=True, capture_output=True)
    subprocess.run(["openssl", "x509", "-req", "-in", f"{work}/{name}.csr", "-CA", f"{work}/{ca}.pem",
                    "-CAkey", f"{work}/{ca}.key", "-CAcreateserial", "-days", "2",
                    "-extfile", f"{work}/{name}.cnf", "-out", f"{work}/{name}.pem"], check=True, capture_output=True)


def spread(values, unit=""):
    """`median [min-max]` of `values`, two decimals, `unit` after the median."""
    return f"{statistics.median(values):.2f}{unit} [{min(values):.2f}-{max(values):.2f}]"


def ms(value):
    """A wrk latency (`812.00us`, `1.25ms`, `1.00s`) in milliseconds; NaN if unreadable."""
    found = re.match(r"([\d.]+)(us|ms|s|m)", value)
    if not found:
        return float("nan")
    number, unit = found.groups()
    return float(number) * {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}[unit]


def fleet_certs(work, member):
    """The fleet CA (made once in `work`) and the certificate of member `member`
    (`robotsgate fleet-cert --member`): the peer channel's keys of its `fleet:` section."""
    paths = [f"{work}/{name}" for name in ("fleet-ca.pem", "fleet-ca.key", f"{member}.pem", f"{member}.key")]
    if not os.path.exists(paths[2]):
        subprocess.run([f"{ROOT}/target/release/robotsgate", "fleet-cert", "--ca", paths[0], "--ca-key", paths[1],
                        "--cert", paths[2], "--key", paths[3], "--member", member], check=True,
                       stdout=subprocess.DEVNULL)
    return f"    peer_ca: {paths[0]}\n    peer_cert: {paths[2]}\n    peer_key: {paths[3]}\n"


def start_redis(work, started):
    """A redis-server on a free loopback port that persists nothing (kept in `started`):
    its port."""
    port = free_port()
    started.append(subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                     "--appendonly", "no", "--dir", work], stdout=subprocess.DEVNULL))
    wait_port(port)
    return port


def fleet_member(work, name, redis_port, started, prefix=(), binary=f"{ROOT}/target/release/robotsgate"):
    """Member `name` of the fleet on the redis-server at `redis_port`, as the fleet benches
    run it: no admin listener, pacing that makes no request wait (no margin, no in-flight
    limit), every origin staying with the member that met it first (none follows another
    member's traffic), started under `prefix` (taskset, valgrind) from `binary` (another
    build to compare with: its certificate is this build's, naming the member) and kept in
    `started`: (process, proxy port, peer channel port)."""
    path = robotsgate_config(work, name, "  admin_listen: null\n"
                             "  pacing:\n    margin_seconds: 0\n    max_in_flight: 0\n"
                             f"  fleet:\n    redis: redis://127.0.0.1:{redis_port}/0\n"
                             f"    follow_traffic_seconds: 0\n{fleet_certs(work, name)}", POOL)
    port, peer = free_port(), free_port()
    command = [*prefix, binary, "run", "--config", path,
               "--listen", f"127.0.0.1:{port}", "--peer-listen", f"127.0.0.1:{peer}",
               "--allow-destination", "127.0.0.0/8", "--agent", "ExampleBot"]
    proc = subprocess.Popen(command, env={**os.environ, "RUST_LOG": "warn"}, stdout=subprocess.DEVNULL,
                            stderr=open(f"{work}/{name}.log", "w"))
    started.append(proc)
    wait_port(port, 120)  # under valgrind, start-up takes seconds
    return proc, port, peer


# The HTTPS load client (examples/https_load), shared by https_bench.py and h2_bench.py.
LOAD = f"{ROOT}/target/release/examples/https_load"

# Proxies on one core, the origin and the client on the other (as in proxy_bench.py).
PROXY_CPU, CLIENT_CPU = ["taskset", "-c", "1"], ["taskset", "-c", "0"]


def start_load(args, pid=None):
    """Starts the load client (on the client's CPU); `pid`'s CPU time counts from now."""
    before = cpu_seconds(pid) if pid else 0.0
    proc = subprocess.Popen([*CLIENT_CPU, LOAD, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, args, pid, before


def load_result(started):
    """Waits for a client of `start_load`: its JSON result, with `pid`'s CPU seconds."""
    proc, args, pid, before = started
    stdout, stderr = proc.communicate()
    if proc.returncode != 0:
        sys.exit(f"https_load {' '.join(args)} failed:\n{stderr}")
    result = json.loads(stdout.strip().splitlines()[-1])
    if pid:
        result["cpu_s"] = cpu_seconds(pid) - before
    return result


def run_load(args, pid=None):
    return load_result(start_load(args, pid))
