"""`tally openstack simulate` as a newcomer runs it: a process serving the fake OpenStack, its printed
clouds.yaml entry used by a real openstacksdk client and by `tally sync`, stopped by Ctrl-C."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import openstack
import openstack.config
import pytest
import yaml

from tally_pipeline.bench.common import free_port

pytestmark = pytest.mark.slow  # real processes

END = "# Ctrl-C to stop."


def _banner(proc: subprocess.Popen[bytes], deadline: float) -> str:
    """What the process printed up to its last banner line (it then serves until stopped)."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    seen = b""
    while END.encode() not in seen:
        left = deadline - time.monotonic()
        assert left > 0 and proc.poll() is None, f"no banner; printed {seen!r}, exit {proc.poll()}"
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            chunk = os.read(fd, 65536)
            assert chunk, f"the output ended before the banner: {seen!r}"
            seen += chunk
    return seen.decode()


@pytest.fixture
def simulated(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str, int]]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tally_pipeline", "openstack", "simulate", "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        yield proc, _banner(proc, time.monotonic() + 120), port
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)


def test_a_real_client_lists_the_servers_from_the_printed_entry(simulated, tmp_path: Path) -> None:
    proc, banner, port = simulated
    clouds = yaml.safe_load(banner)  # the whole banner is YAML: comments and the entry
    entry = clouds["clouds"]["tally-simulated"]
    assert entry["auth"]["auth_url"] == f"http://127.0.0.1:{port}/identity"
    path = tmp_path / "clouds.yaml"
    path.write_text(yaml.safe_dump(clouds))
    live = dict((t, int(n)) for n, t in re.findall(r"(\d+) (instance|volume|floating_ip|image|load_balancer)\b", banner))
    assert live["instance"] > 0

    region = openstack.config.OpenStackConfig(config_files=[str(path)]).get_one(cloud="tally-simulated")
    conn = openstack.connection.Connection(config=region)
    try:
        servers = list(conn.compute.servers(all_projects=True))
        volumes = list(conn.block_storage.volumes(all_projects=True))
    finally:
        conn.close()
    assert len(servers) == live["instance"] and all(s.id and s.status for s in servers)
    assert len(volumes) == live["volume"]

    # the printed tally config line, with the entry found through OS_CLIENT_CONFIG_FILE
    config = tmp_path / "tally.yaml"
    config.write_text(f"database: duckdb://{tmp_path / 'tally.duckdb'}\n"
                      "clouds: {sim: {provider: openstack, os_cloud: tally-simulated}}\n")
    env = {**os.environ, "OS_CLIENT_CONFIG_FILE": str(path)}
    env.pop("TALLY_DATABASE", None)
    synced = subprocess.run([sys.executable, "-m", "tally_pipeline", "sync", "sim", "--config", str(config)],
                            capture_output=True, text=True, timeout=300, env=env)
    assert synced.returncode == 0, synced.stdout + synced.stderr
    row = next(line.split() for line in synced.stdout.splitlines() if line.split()[:1] == ["instance"])
    assert int(row[1]) == live["instance"]  # listed

    # Keystone refusing the credentials fails every type for one cause: said once, not once per type
    path.write_text(yaml.safe_dump(clouds).replace(entry["auth"]["password"], "wrong-password"))
    refused = subprocess.run([sys.executable, "-m", "tally_pipeline", "sync", "sim", "--config", str(config)],
                             capture_output=True, text=True, timeout=300, env=env)
    assert refused.returncode == 1
    assert refused.stdout.count("authentication refused") == 1, refused.stdout
    assert refused.stdout.count("NOT LISTED: the same error as ") == 4, refused.stdout
    runs = subprocess.run([sys.executable, "-m", "tally_pipeline", "sync-runs", "--config", str(config), "--limit", "1"],
                          capture_output=True, text=True, timeout=120, env=env)
    error = json.loads(runs.stdout)[0]["error"]
    assert error.startswith("floating_ip, image, instance, load_balancer, volume: ") and error.count("refused") == 1

    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C
    assert proc.wait(timeout=60) == 0
    assert proc.stderr is not None and b"# stopped" in proc.stderr.read()


def test_a_taken_port_is_refused_with_a_reason() -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "tally_pipeline", "openstack", "simulate", "--port", str(port)],
                              capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and f"cannot serve on 127.0.0.1:{port}" in done.stderr
