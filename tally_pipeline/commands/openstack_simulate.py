"""``tally openstack simulate``: the project's fake OpenStack, serving a simulated cloud until stopped.

Keystone and the five services the adapter reads (nova, cinder, neutron, glance, octavia) on one
loopback port, answering any openstacksdk client (the ``openstack`` CLI too) from the ground-truth
simulator: a newcomer can point a clouds.yaml entry at it and try the real adapter, `tally openstack
check` and `tally sync` without a cloud.
"""

from __future__ import annotations

import signal
import threading
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

import click
import yaml

ENTRY = "tally-simulated"


def _banner(name: str, sim: Any, fake: Any, entry: dict[str, Any]) -> str:
    live = {rtype: len(sim.platform.records(name, rtype, at=fake.now())) for rtype in sim.platform.resource_types}
    lines = [
        f"# A fake OpenStack (keystone, nova, cinder, neutron, glance, octavia) on {fake.base_url}, serving the",
        f"# simulated cloud {name!r} (seed {sim.spec.seed}, {sim.spec.hours:g} hours of history to "
        f"{sim.end.strftime('%Y-%m-%dT%H:%MZ')}): " + ", ".join(f"{n} {t}" for t, n in live.items()) + " live.",
        "# A clouds.yaml entry (save as ./clouds.yaml, ~/.config/openstack/clouds.yaml, or point",
        "# OS_CLIENT_CONFIG_FILE at it):",
        yaml.safe_dump({"clouds": {ENTRY: entry}}, sort_keys=False).rstrip(),
        f"# Try (python-openstackclient):  openstack --os-cloud {ENTRY} server list --all-projects",
        f"# tally: clouds: {{{name}: {{provider: openstack, os_cloud: {ENTRY}}}}} in the config, then",
        f"#        tally openstack check {name}  and  tally sync {name}",
        "# Ctrl-C to stop.",
    ]
    return "\n".join(lines)


@click.command("simulate")
@click.option("--port", type=click.IntRange(min=0, max=65535), default=0,
              help="The loopback port to serve on (default: a free one, printed).")
@click.option("--name", default="sim", show_default=True, help="The simulated cloud's name.")
@click.option("--seed", type=int, default=1, show_default=True, help="The simulator's seed: the same seed, the same cloud.")
@click.option("--projects", type=click.IntRange(min=1), default=4, show_default=True)
@click.option("--resources", type=click.IntRange(min=0), default=60, show_default=True,
              help="Resources alive at any time, roughly.")
@click.option("--hours", type=click.FloatRange(min=1), default=48.0, show_default=True,
              help="Hours of simulated history, ending at the current hour (nova's deleted servers come from it).")
@click.option("--clouds-yaml", "clouds_yaml", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the clouds.yaml entry to this file.")
def simulate(port: int, name: str, seed: int, projects: int, resources: int, hours: float,
             clouds_yaml: Path | None) -> None:
    """Serve a simulated cloud as OpenStack (keystone + the services) on 127.0.0.1, in the foreground
    until Ctrl-C (or SIGTERM); print the clouds.yaml entry that reaches it (user admin, role admin)."""
    from tally_pipeline.config import SimulatedCloud
    from tally_pipeline.fakes.openstack import FakeOpenStack
    from tally_pipeline.providers.simulated.simulation import simulate_cloud

    sim = simulate_cloud(name, SimulatedCloud(provider="simulated", seed=seed, projects=projects,
                                              resources=resources, hours=hours), now=datetime.now(UTC))
    stop = threading.Event()

    def stop_on(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, stop_on) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        fake = FakeOpenStack(sim.platform, cloud=name, port=port)
        try:
            fake.start()
        except OSError as exc:
            raise click.ClickException(f"cannot serve on 127.0.0.1:{port}: {exc.strerror}") from None
        try:
            entry = fake.clouds_yaml_entry()
            if clouds_yaml is not None:
                clouds_yaml.write_text(yaml.safe_dump({"clouds": {ENTRY: entry}}, sort_keys=False), encoding="utf-8")
            click.echo(_banner(name, sim, fake, entry))
            stop.wait()
        finally:
            fake.stop()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    click.echo("# stopped", err=True)
