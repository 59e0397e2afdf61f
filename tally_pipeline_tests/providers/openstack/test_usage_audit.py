"""The usage audit against nova's own usage, through the real openstacksdk against the fake nova's
``os-simple-tenant-usage``: green when tally and nova agree, red when a posting is tampered with, each
kind of explained difference, nova's paging with a small limit, and the command's output."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from tally_pipeline.cli import main
from tally_pipeline.providers.simulated.platform import PlatformRecord
from tally_pipeline.runtime import Runtime
from tally_pipeline.services.usage_audit import audit_usage
from tally_pipeline.store.usage_audits import latest
from tally_pipeline_tests.providers.openstack.openstack_cloud import SDK_NOISE
from tally_pipeline_tests.providers.openstack.usage_audit_cloud import LARGE, NOW, SMALL, T1, T2, agreeing, make, server

__all__ = ["make"]  # the fixture

pytestmark = SDK_NOISE

def kinds(run: Any) -> dict[str, list[tuple[str | None, str]]]:
    out: dict[str, list[tuple[str | None, str]]] = {}
    for d in run.result.differences:
        out.setdefault(d.kind, []).append((d.server_id, d.meter))
    return out


def figure(run: Any, project: str, meter: str) -> Any:
    [p] = [p for p in run.result.projects if p.project_id == project and p.meter == meter]
    return p


def test_green_when_the_ledger_agrees_with_nova_and_red_when_a_posting_is_tampered_with(make, store_url) -> None:
    cloud = agreeing(make, database=store_url)  # both stores: the audit's reads and its table
    run = cloud.audit()
    assert run.status == "passed", run.to_dict()
    assert run.result.servers_nova == 3 and run.result.servers_tally == 3
    p1 = figure(run, "p1", "instance_hours")
    # srv-a all day, srv-b from 03:10: 24 + 20 5/6 hours, on both sides
    assert p1.nova_micro == pytest.approx(44_833_333, abs=1) and abs(p1.ledger_micro - p1.nova_micro) <= 2
    assert figure(run, "p1", "vcpu_hours").nova_micro == pytest.approx(24_000_000 + 4 * 20_833_333, abs=10)
    assert figure(run, "p2", "instance_hours").nova_micro == pytest.approx(6_008_333, abs=1)
    assert not [d for d in run.result.differences if not d.explained]
    [kept] = latest(cloud.rt.store)
    assert kept["status"] == "passed" and kept["cloud"] == "c1" and kept["api_calls"] == 1

    cloud.tamper("p1", "vcpu_hours", "3.5")
    run = cloud.audit()
    assert run.status == "failed"
    [failing] = run.result.failing
    assert (failing.project_id, failing.meter, failing.unexplained_micro) == ("p1", "vcpu_hours", 3_500_000)
    assert kinds(run) == {"ledger_mismatch": [(None, "vcpu_hours")]}
    assert latest(cloud.rt.store)[0]["status"] == "failed"


def test_a_small_tamper_passes_inside_the_tolerance_and_fails_outside_it(make) -> None:
    cloud = agreeing(make, audit={"tolerance_hours": 0.5, "tolerance_ratio": 0})
    cloud.tamper("p2", "instance_hours", "0.4")
    assert cloud.audit().status == "passed"
    cloud.tamper("p2", "instance_hours", "0.2")
    run = cloud.audit()
    assert run.status == "failed" and figure(run, "p2", "instance_hours").unexplained_micro == 600_000


def test_nova_pages_by_server_and_every_page_is_read(make) -> None:
    cloud = agreeing(make, audit={"page_size": 1})
    run = cloud.audit()
    assert run.status == "passed", run.to_dict()
    # one server a page: three full pages, then an empty one that ends the listing
    assert run.api_calls == cloud.fake.usage_pages == 4
    pages = [r for r in cloud.fake.requests if r.path.endswith("/os-simple-tenant-usage")]
    assert [r.query.get("marker") for r in pages] == [None, ["srv-a"], ["srv-b"], ["srv-c"]]
    assert all(r.query["limit"] == ["1"] and r.query["detailed"] == ["1"] for r in pages)
    assert all(r.microversion == "2.96" for r in pages)
    assert figure(run, "p1", "instance_hours").nova_micro == figure(run, "p1", "instance_hours").ledger_micro


def test_a_resize_that_reset_novas_launched_at_is_explained(make) -> None:
    launched = T1 + timedelta(hours=2)
    resized = T1 + timedelta(hours=10)
    # nova's finish_resize moved launched_at to the resize: nova counts from there at the new flavor
    cloud = make([server("srv-r", "p1", LARGE, resized)])
    cloud.event("srv-r", "p1", launched, "create", SMALL)
    cloud.event("srv-r", "p1", resized, "update", LARGE)
    cloud.post()
    run = cloud.audit()
    assert run.status == "passed", run.to_dict()
    found = {(d.kind, d.meter): d.amount_micro for d in run.result.differences}
    assert found == {("resize_launched_at", "instance_hours"): 8_000_000, ("resize_launched_at", "vcpu_hours"): 8_000_000}
    assert figure(run, "p1", "instance_hours").difference_micro == 8_000_000
    assert all("resized (m1.small/1/2048 → m1.large/4/8192)" in d.detail for d in run.result.differences)


def test_a_later_launched_at_without_a_resize_in_tallys_history_is_not_excused(make) -> None:
    cloud = make([server("srv-x", "p1", SMALL, T1 + timedelta(hours=10))])
    cloud.event("srv-x", "p1", T1 + timedelta(hours=2), "create", SMALL)
    cloud.post()
    run = cloud.audit()
    assert run.status == "failed"
    assert kinds(run)["server_hours"] == [("srv-x", "instance_hours"), ("srv-x", "vcpu_hours")]


def test_usage_after_the_checkpoint_clamp_is_explained_as_not_yet_posted(make) -> None:
    cloud = make([server("srv-a", "p1", SMALL, T1 - timedelta(hours=5))])
    cloud.event("srv-a", "p1", T1 - timedelta(hours=5), "create", SMALL)
    cloud.post(now=T1 + timedelta(hours=20, minutes=15))  # the latest cycle's clamp: 20:00
    run = cloud.audit()
    assert run.status == "passed", run.to_dict()
    assert {(d.kind, d.meter): d.amount_micro for d in run.result.differences} == {
        ("not_posted", "instance_hours"): -4_000_000, ("not_posted", "vcpu_hours"): -4_000_000}
    assert figure(run, "p1", "instance_hours").ledger_micro == 20_000_000


def test_rounding_to_the_second_is_explained_and_a_status_the_meter_does_not_bill_too(make) -> None:
    launched = T1 + timedelta(hours=1)
    stopped = T1 + timedelta(hours=5)
    cloud = make([server("srv-s", "p1", SMALL, launched, status="SHUTOFF")],
                 meters={"instance_hours": {"unbilled_statuses": ["shutoff"]}})
    cloud.event("srv-s", "p1", launched + timedelta(milliseconds=700), "create", SMALL)  # nova: to the second
    cloud.event("srv-s", "p1", stopped, "power_off", SMALL, status="shutoff")
    cloud.post()
    run = cloud.audit()
    assert run.status == "passed", run.to_dict()
    found = kinds(run)
    assert ("srv-s", "instance_hours") in found["rounding"] and ("srv-s", "vcpu_hours") in found["rounding"]
    assert found["unbilled_status"] == [("srv-s", "instance_hours")]  # 19 h shutoff: nova counts them
    [unbilled] = [d for d in run.result.differences if d.kind == "unbilled_status"]
    assert unbilled.amount_micro == -19_000_000


def test_a_server_only_one_side_knows_fails_unless_a_deferral_explains_it(make) -> None:
    known = server("srv-k", "p1", SMALL, T1 + timedelta(hours=1))
    unknown = server("srv-n", "p2", SMALL, T1 + timedelta(hours=2))
    cloud = make([known, unknown])
    cloud.event("srv-k", "p1", known.launched_at, "create", SMALL)
    cloud.event("srv-t", "p1", T1 + timedelta(hours=3), "create", SMALL)  # nova never ran it
    cloud.post()
    run = cloud.audit()
    assert run.status == "failed"
    found = kinds(run)
    assert found["only_in_nova"] == [("srv-n", "instance_hours"), ("srv-n", "vcpu_hours")]
    assert found["only_in_tally"] == [("srv-t", "instance_hours"), ("srv-t", "vcpu_hours")]


def test_a_server_reconciliation_deferred_is_explained(make) -> None:
    moving = PlatformRecord("instance", "srv-m", "p2", dict(SMALL), "RESIZE", "resize_migrating",
                            T1 + timedelta(hours=2), NOW, name="srv-m", launched_at=T1 + timedelta(hours=2))
    cloud = make([moving])
    run = cloud.rt.sync("c1", now=NOW)  # a server in transition: deferred, not created
    assert run.deferrals_by_reason() == {"in_transition": 1}
    audit = cloud.audit()
    assert audit.status == "passed", audit.to_dict()
    assert kinds(audit) == {"deferral": [("srv-m", "instance_hours"), ("srv-m", "vcpu_hours")]}


def test_nova_refuses_a_window_with_an_offset_and_an_unknown_marker(make) -> None:
    cloud = agreeing(make)
    compute = cloud.rt.adapter("c1").connection.compute
    bad = compute.get("/os-simple-tenant-usage", params={"start": "2026-03-01T00:00:00+00:00"},
                      microversion="2.96", raise_exc=False)
    assert bad.status_code == 400 and "Datetime is in invalid format" in bad.text
    bad = compute.get("/os-simple-tenant-usage", params={"start": "2026-03-01T00:00:00", "end": "2026-03-02T00:00:00",
                                                         "marker": "nope"}, microversion="2.96", raise_exc=False)
    assert bad.status_code == 400 and "Marker nope could not be found" in bad.text
    # one project, as the API reference shows it (tenant_usage, every server detailed)
    one = compute.get("/os-simple-tenant-usage/p2", params={"start": "2026-03-01T00:00:00",
                                                            "end": "2026-03-02T00:00:00"}, microversion="2.96").json()
    usage = one["tenant_usage"]
    assert usage["tenant_id"] == "p2" and [s["instance_id"] for s in usage["server_usages"]] == ["srv-c"]
    assert usage["server_usages"][0]["state"] == "terminated" and usage["stop"] == "2026-03-02T00:00:00.000000"


def test_an_audit_that_cannot_read_nova_is_an_error_never_green(make, tmp_path) -> None:
    cloud = agreeing(make)
    cloud.fake.add_user("viewer", "pw", project_name="p1", roles=("member",))
    entry = cloud.fake.tally_cloud_entry("viewer", timeout=30)
    config = yaml.safe_load(cloud.config_path.read_text())
    config["clouds"]["c1"] = entry
    cloud.config_path.write_text(yaml.safe_dump(config))
    rt = Runtime.load(str(cloud.config_path))
    try:
        run = audit_usage(rt.store, rt.registry, "c1", rt.adapter("c1"), T1, T2, rt.config.audit, now=NOW)
    finally:
        rt.close()
    assert run.status == "error" and "403" in (run.error or "")
    assert latest(cloud.rt.store)[0]["status"] == "error"


def test_the_command_prints_the_verdict_and_exits_by_it(make) -> None:
    cloud = agreeing(make)
    cloud.rt.close()  # the command opens the embedded database itself
    args = ["openstack", "audit-usage", "--config", str(cloud.config_path), "--cloud", "c1",
            "--from", "2026-03-01T00:00:00Z", "--to", "2026-03-02T00:00:00Z"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "c1: usage audit [2026-03-01T00:00:00Z, 2026-03-02T00:00:00Z): PASSED" in result.output
    assert "p1" in result.output and "instance_hours" in result.output
    body = json.loads(CliRunner().invoke(main, [*args, "--json"]).output)
    assert body["status"] == "passed" and body["servers"] == {"nova": 3, "tally": 3}
    assert {p["project_id"] for p in body["projects"]} == {"p1", "p2"}

    rt = Runtime.load(str(cloud.config_path))
    rt.store.run(lambda uow: uow.execute(
        "UPDATE ledger_postings SET amount = amount - 2 WHERE project_id = 'p2' AND meter = 'instance_hours'"))
    rt.close()
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1, result.output
    assert "FAILS" in result.output and "ledger_mismatch UNEXPLAINED" in result.output
    bad = CliRunner().invoke(main, [*args[:-4], "--from", "2026-03-02T00:00:00Z", "--to", "2026-03-01T00:00:00Z"])
    assert bad.exit_code == 2 and "must be after --from" in bad.output


def test_the_fake_answers_in_novas_shape_and_pages_by_server(make) -> None:
    """The fields nova's API reference lists for ``GET /os-simple-tenant-usage?detailed=1`` (2.40), and its
    paging: a full page links the next one, one project's servers run over two pages."""
    cloud = agreeing(make)
    compute = cloud.rt.adapter("c1").connection.compute
    params = {"start": "2026-03-01T00:00:00", "end": "2026-03-02T00:00:00", "detailed": "1", "limit": "2"}
    first = compute.get("/os-simple-tenant-usage", params=params, microversion="2.40").json()
    [p1] = first["tenant_usages"]
    assert set(p1) == {"tenant_id", "server_usages", "start", "stop", "total_hours", "total_local_gb_usage",
                       "total_memory_mb_usage", "total_vcpus_usage"}
    assert set(p1["server_usages"][0]) == {"instance_id", "name", "tenant_id", "hours", "flavor", "memory_mb",
                                           "local_gb", "vcpus", "started_at", "ended_at", "state", "uptime"}
    assert [s["instance_id"] for s in p1["server_usages"]] == ["srv-a", "srv-b"]
    assert p1["total_hours"] == pytest.approx(24 + 20 + 50 / 60)
    assert p1["total_vcpus_usage"] == pytest.approx(24 + 4 * (20 + 50 / 60))
    [link] = first["tenant_usages_links"]
    assert link["rel"] == "next" and "marker=srv-b" in link["href"] and "limit=2" in link["href"]
    second = compute.get("/os-simple-tenant-usage", params={**params, "marker": "srv-b"}, microversion="2.40").json()
    assert [u["tenant_id"] for u in second["tenant_usages"]] == ["p2"] and "tenant_usages_links" not in second
    # before 2.40 nova does not page: no link, whatever the limit
    old = compute.get("/os-simple-tenant-usage", params=params, microversion="2.39").json()
    assert "tenant_usages_links" not in old and len(old["tenant_usages"]) == 2
