"""Scope safety through the real openstacksdk and `tally sync`: credentials that cannot see every
project delete nothing (insufficient_scope, partial, TallySyncErrors red), a per-service global
reader reconciles its service only, a listing narrowed to the own project is not enumerated, a
tripped mass-delete guard makes the run partial, and `tally openstack check` says all of it."""

from __future__ import annotations

import orjson
import pytest
from click.testing import CliRunner

from tally_pipeline.api.metrics import exposition, store_families
from tally_pipeline.cli import main
from tally_pipeline.core.alerts import AlertSettings
from tally_pipeline.services import alerts
from tally_pipeline.store import open_store
from tally_pipeline_tests.providers.openstack.openstack_cloud import NOW, SDK_NOISE, SMALL, T0, record, running_fake
from tally_pipeline_tests.providers.openstack.sync_cli import known, query, tally_sync, write_config

pytestmark = [*SDK_NOISE, pytest.mark.slow]
CLOUD = "region-one"
TYPES = ("instance", "volume", "floating_ip", "image", "load_balancer")


def cloud_of_two_projects():
    """Every type in p-alpha (the member's project) and p-beta; one p-beta image is public."""
    vol = {"gb": 10, "volume_type": "ssd"}
    return [
        record("instance", "srv-a", SMALL, "ACTIVE", minute=1), record("instance", "srv-b", SMALL, "ACTIVE", minute=2,
                                                                       project="p-beta"),
        record("volume", "vol-a1", vol, "available", minute=3), record("volume", "vol-a2", vol, "in-use", minute=4),
        *(record("volume", f"vol-b{i}", vol, "available", minute=5 + i, project="p-beta") for i in range(3)),
        record("floating_ip", "fip-a", {"floating_network_id": "ext"}, "ACTIVE", minute=10),
        record("floating_ip", "fip-b", {"floating_network_id": "ext"}, "DOWN", minute=11, project="p-beta"),
        record("image", "img-a", {"bytes": 1024}, "active", minute=12),
        record("image", "img-b-private", {"bytes": 2048}, "active", minute=13, project="p-beta"),
        record("image", "img-b-public", {"bytes": 4096}, "active", minute=14, project="p-beta"),
        record("load_balancer", "lb-a", {"flavor_id": "small"}, "ACTIVE", minute=15),
        record("load_balancer", "lb-b", {"flavor_id": "small"}, "ACTIVE", minute=16, project="p-beta"),
    ]


def sync_deletes(database: str) -> list[str]:
    return [r for (r,) in query(database, "SELECT resource_id FROM events WHERE event_type = 'sync.delete' "
                                          "ORDER BY resource_id")]


def red_and_metrics(database: str) -> tuple[alerts.rules.Condition, list[str]]:
    store = open_store(database)
    try:
        condition = alerts.evaluate(store, [CLOUD], NOW, AlertSettings())["sync_errors"]
        return condition, exposition(store_families(store, [CLOUD])).splitlines()
    finally:
        store.close()


def test_credentials_without_admin_delete_nothing_and_turn_sync_errors_red(tmp_path) -> None:
    database = f"duckdb://{tmp_path / 'tally.duckdb'}"
    records = cloud_of_two_projects()
    known(database, CLOUD, *records, at=T0)
    with running_fake(records) as fake:
        fake.publish("img-b-public")  # a member sees another project's public image: not every project
        fake.add_user("alice", "pw", project_name="p-alpha", project_id="p-alpha", roles=("member", "reader"))
        config = write_config(tmp_path, fake, cloud=CLOUD, database=database, user="alice")
        code, run, out = tally_sync(config, CLOUD, at=NOW, run_key="tick:member")
        asked_by_id = [r.path for r in fake.requests if r.show]
    assert code == 1, out  # no type could be reconciled: the run failed
    assert sync_deletes(database) == []  # upstream would have answered 404 for every p-beta resource
    assert asked_by_id == []  # nothing was even asked: no type may delete
    assert run["status"] == "failed" and run["deleted"] == 0
    for rtype in TYPES:
        outcome = run["per_type"][rtype]
        assert (outcome["status"], outcome["code"]) == ("failed", "insufficient_scope"), (rtype, outcome)
    assert "get_all_tenants" in run["per_type"]["instance"]["reason"]  # nova said it with a 403
    assert "cinder lists only the token's own project" in run["per_type"]["volume"]["reason"]
    assert "insufficient_scope" in run["error"]
    condition, lines = red_and_metrics(database)
    assert condition.firing and "insufficient_scope" in condition.message
    assert f'tally_sync_last_insufficient_scope{{cloud="{CLOUD}"}} 5.0' in lines
    assert f'tally_sync_last_failed{{cloud="{CLOUD}"}} 1.0' in lines


def test_a_load_balancer_global_observer_reconciles_load_balancers_only(tmp_path) -> None:
    database = f"duckdb://{tmp_path / 'tally.duckdb'}"
    records = cloud_of_two_projects()
    gone = record("load_balancer", "lb-gone", {"flavor_id": "small"}, "ACTIVE", minute=17, project="p-beta")
    known(database, CLOUD, *records, gone, at=T0)
    with running_fake(records) as fake:
        fake.add_user("watcher", "pw", project_name="p-alpha", project_id="p-alpha",
                      roles=("member", "load-balancer_global_observer"))
        config = write_config(tmp_path, fake, cloud=CLOUD, database=database, user="watcher")
        code, run, out = tally_sync(config, CLOUD, at=NOW, run_key="tick:observer")
    assert code == 0, out
    assert run["per_type"]["load_balancer"]["status"] == "enumerated"
    assert run["per_type"]["load_balancer"]["listed"] == 2  # both projects' load balancers
    assert sync_deletes(database) == ["lb-gone"]  # really gone: octavia answers the observer 404
    for rtype in ("instance", "volume", "floating_ip", "image"):
        assert run["per_type"][rtype]["code"] == "insufficient_scope", rtype
    assert run["status"] == "partial"


def test_a_listing_narrowed_to_the_own_project_is_not_enumerated(tmp_path) -> None:
    # The deployment declares (wrongly) that "member" lists every project's volumes: cinder still
    # narrows, and the listing holding nothing but p-alpha gives it away.
    database = f"duckdb://{tmp_path / 'tally.duckdb'}"
    records = [r for r in cloud_of_two_projects() if r.resource_type == "volume"]
    known(database, CLOUD, *records, at=T0)
    with running_fake(records) as fake:
        fake.add_user("alice", "pw", project_name="p-alpha", project_id="p-alpha", roles=("member",))
        config = write_config(tmp_path, fake, cloud=CLOUD, database=database, user="alice",
                              cloud_options={"resource_types": ["volume"],
                                             "all_projects_roles": {"volume": ["member"]}})
        code, run, out = tally_sync(config, CLOUD, at=NOW, run_key="tick:narrow")
    assert code == 1, out  # the only type failed: the run failed
    volume = run["per_type"]["volume"]
    assert (volume["status"], volume["code"]) == ("failed", "insufficient_scope")
    assert "holds only project p-alpha's 2 resources" in volume["reason"]
    assert "3 live volume resources of other projects" in volume["reason"]
    assert sync_deletes(database) == []


def test_a_tripped_mass_delete_guard_makes_the_run_partial_and_shows_in_check_and_metrics(tmp_path) -> None:
    database = f"duckdb://{tmp_path / 'tally.duckdb'}"
    vol = {"gb": 1, "volume_type": None}
    volumes = [record("volume", f"vol-{i:02d}", vol, "available", minute=i) for i in range(25)]
    known(database, CLOUD, *volumes, at=T0)
    with running_fake(volumes[:5]) as fake:  # 20 of 25 missing: the listing looks wrong
        config = write_config(tmp_path, fake, cloud=CLOUD, database=database,
                              cloud_options={"resource_types": ["volume"], "page_size": 100})
        code, run, out = tally_sync(config, CLOUD, at=NOW, run_key="tick:guard")
        checked = CliRunner().invoke(main, ["openstack", "check", CLOUD, "--config", str(config)])
    assert code == 0, out
    assert run["status"] == "partial" and run["deleted"] == 0
    assert run["per_type"]["volume"]["guard_tripped"]
    assert "mass_delete_guard held deletes: 20 of 25 live volume" in run["error"]
    condition, lines = red_and_metrics(database)
    assert condition.firing and "mass_delete_guard" in condition.message
    assert f'tally_sync_last_failed{{cloud="{CLOUD}"}} 1.0' in lines
    assert f'tally_sync_last_guard_tripped{{cloud="{CLOUD}"}} 1.0' in lines
    assert checked.exit_code == 1, checked.output
    assert "latest run: partial" in checked.output and "mass-delete guard held 20 deletes" in checked.output


@pytest.mark.parametrize("user", ["admin", "alice"])
def test_openstack_check_says_per_type_what_the_credentials_see(tmp_path, user) -> None:
    database = f"duckdb://{tmp_path / 'tally.duckdb'}"
    with running_fake(cloud_of_two_projects()) as fake:
        fake.publish("img-b-public")
        fake.add_user("alice", "pw", project_name="p-alpha", project_id="p-alpha", roles=("member",))
        config = write_config(tmp_path, fake, cloud=CLOUD, database=database, user=user)
        text = CliRunner().invoke(main, ["openstack", "check", CLOUD, "--config", str(config)])
        as_json = CliRunner().invoke(main, ["openstack", "check", CLOUD, "--config", str(config), "--json"])
    body = orjson.loads(as_json.output)
    types = body["types"]
    if user == "admin":
        assert text.exit_code == 0, text.output
        assert all(types[t]["deletes_allowed"] for t in TYPES)
        assert types["volume"]["listed"] == 5 and types["volume"]["projects"] == 2
        assert body["deleted_listing"] == "available"
        assert text.output.count("deletes by absence ALLOWED") == 5
    else:
        assert text.exit_code == 1, text.output
        assert not any(types[t]["deletes_allowed"] for t in TYPES)
        assert "HTTP 403" in types["instance"]["error"]
        assert types["volume"]["listed"] is None and "insufficient_scope" in types["volume"]["scope"]
        assert body["credentials"]["roles"] == ["member"] and body["credentials"]["project_id"] == "p-alpha"
        assert body["deleted_listing"].startswith("unavailable")
        assert text.output.count("NOT reconciled (nothing deleted)") == 5
        assert "roles: member" in text.output
