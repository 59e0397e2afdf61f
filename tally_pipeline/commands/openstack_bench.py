"""``tally bench openstack``: list N servers from the fake OpenStack through the adapter, then confirm
the ones a reconciliation would find missing.

At ``--drift`` (default 1 %) of N, that many servers are asked for by id after the listing, as
reconciliation does before any delete by absence: half of them are really gone (404), half sit in
a down nova cell (left out of the paged listing, still answering). The report gives the listing
and the confirmations apart, and their sum.

The fake runs in this process; the listing runs in a fresh child process per N, so its memory is
the adapter's alone. Peak RSS is sampled from ``/proc/self/statm`` four times per 1000-item page
while listing (``ru_maxrss`` is no use here: Linux carries it across ``exec`` from the forking
parent, which holds the fake's records). Because the adapter streams page by page, the growth
while listing should not depend on N: 50,000 servers should cost what 5,000 do.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import click

from tally_pipeline.commands._bench_report import print_report

CHILD_FLAG = "--child"


def _servers(n: int, start: datetime) -> list[Any]:
    from tally_pipeline.providers.simulated.platform import PlatformRecord

    flavors = [("m1.small", 1, 2048, 20), ("m1.medium", 2, 4096, 40), ("m1.large", 4, 8192, 80)]
    records = []
    for i in range(n):
        name, vcpus, ram, disk = flavors[i % len(flavors)]
        created = start + timedelta(seconds=i)
        records.append(PlatformRecord(
            resource_type="instance",
            resource_id=f"00000000-0000-4000-8000-{i:012d}",
            project_id=f"project-{i % 97:03d}",
            size={"flavor_name": name, "vcpus": vcpus, "ram_mb": ram, "disk_gb": disk},
            status="ACTIVE",
            task_state=None,
            created_at=created,
            updated_at=created,
            name=f"bench-{i}",
        ))
    return records


def run(servers: list[int], *, page_size: int = 1000, drift: float = 0.01) -> dict[str, Any]:
    """Measure each N in its own child process; the fake serves from this one."""
    from tally_pipeline.fakes.openstack import FakeOpenStack
    from tally_pipeline.fakes.static_view import StaticView

    start = datetime(2026, 1, 1, tzinfo=UTC)
    runs = []
    for n in servers:
        records = _servers(n, start)
        missing = max(2, round(n * drift)) if drift > 0 else 0
        down = [r.resource_id for r in records[: missing // 2]]  # listed nowhere, still running
        gone = [f"00000000-0000-4000-9000-{i:012d}" for i in range(missing - len(down))]  # deleted: 404
        view = StaticView.of(records)
        with FakeOpenStack(view, at=start + timedelta(days=1)) as fake:
            fake.cell_down(*down)
            spec = {"auth": fake.auth(), "page_size": page_size, "confirm": down + gone}
            child = subprocess.run(
                [sys.executable, "-m", __name__, CHILD_FLAG, json.dumps(spec)],
                capture_output=True, text=True, check=False, timeout=3600,
            )
            listed = fake.list_requests("instance")
        if child.returncode != 0:
            raise click.ClickException(f"listing {n} servers failed: {child.stderr.strip()[-2000:]}")
        result = json.loads(child.stdout)
        # A server nova answers 404 for is looked up in its deleted listing by id (for its real
        # deletion time): those lookups are part of the confirmations, not of the listing.
        result["list_requests"] = sum(1 for r in listed if "uuid" not in r.query)
        result["deleted_lookups"] = sum(1 for r in listed if "uuid" in r.query)
        runs.append({"servers": n, **result})
    report: dict[str, Any] = {"benchmark": "openstack_listing", "page_size": page_size, "drift": drift, "runs": runs}
    if len(runs) >= 2:
        report["rss_growth_difference_mb"] = round(runs[-1]["rss_growth_mb"] - runs[0]["rss_growth_mb"], 1)
    return report


def _child(spec: dict[str, Any]) -> dict[str, Any]:
    """List every server once; report items/s and memory (this process only)."""
    from tally_pipeline.config import OpenStackCloud
    from tally_pipeline.providers.openstack.adapter import OpenStackAdapter

    config = OpenStackCloud(provider="openstack", auth=spec["auth"], page_size=spec["page_size"],
                            resource_types=["instance"], timeout=120, retries=0)
    with OpenStackAdapter("bench", config) as adapter:
        adapter.connection.authorize()  # keystone and imports are paid before the baseline
        baseline = _current_rss_mb()
        highest = baseline
        began = time.perf_counter()
        items = 0
        for _ in adapter.enumerate("instance", at=datetime.now(UTC)):
            items += 1
            if items % 250 == 0:  # a few samples per page: cheap, and fine enough to see growth
                highest = max(highest, _current_rss_mb())
        seconds = time.perf_counter() - began
        highest = max(highest, _current_rss_mb())
        microversion = adapter.nova_microversion
        began = time.perf_counter()
        answers = adapter.confirm_gone("instance", spec["confirm"], at=datetime.now(UTC)) if spec["confirm"] else {}
        confirm_seconds = time.perf_counter() - began
    return {
        "items": items,
        "seconds": round(seconds, 3),
        "items_per_s": round(items / seconds, 1) if seconds > 0 else None,
        "confirmations": len(answers),
        "confirmed_gone": sum(1 for a in answers.values() if a.gone),
        "confirm_seconds": round(confirm_seconds, 3),
        "confirmations_per_s": round(len(answers) / confirm_seconds, 1) if confirm_seconds > 0 else None,
        "listing_plus_confirm_seconds": round(seconds + confirm_seconds, 3),
        "rss_before_mb": round(baseline, 1),
        "peak_rss_mb": round(highest, 1),
        "rss_growth_mb": round(highest - baseline, 1),
        "nova_microversion": microversion,
    }


def _current_rss_mb() -> float:
    try:
        with open("/proc/self/statm") as statm:
            pages = int(statm.read().split()[1])
    except OSError:  # not Linux: the high-water mark is the best we have (KiB on Linux, bytes on macOS)
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return pages * resource.getpagesize() / (1024 * 1024)


@click.command("openstack")
@click.option("--servers", "servers", type=click.IntRange(min=1), multiple=True, default=(5_000, 50_000),
              show_default=True, help="Servers in the fake cloud; repeat to compare sizes.")
@click.option("--page-size", type=click.IntRange(1, 1000), default=1000, show_default=True)
@click.option("--drift", type=click.FloatRange(0, 1), default=0.01, show_default=True,
              help="Share of N missing from the listing, each confirmed by id afterwards.")
def bench_openstack(servers: tuple[int, ...], page_size: int, drift: float) -> None:
    """List N servers from a local fake OpenStack through the adapter, then confirm the missing ones by id:
    items/s, confirmations/s and peak RSS."""
    print_report(run(list(servers), page_size=page_size, drift=drift))


if __name__ == "__main__" and len(sys.argv) == 3 and sys.argv[1] == CHILD_FLAG:
    print(json.dumps(_child(json.loads(sys.argv[2]))))
