"""Status is part of the history: through the real openstacksdk and `tally sync`, on both stores.

The fake nova shows servers stopped (SHUTOFF), suspended, paused, shelved and offloaded, with the
``OS-EXT-STS`` vm_state and power_state nova gives them. The projection heard some of them as
active (their power notifications lost), one as stopped that was since started, and one not at all.
A billing operator expects each difference booked as a ``sync.update`` carrying the status nova's
API shows (lower-cased, as the collector maps it) — at the poll time here, where nova records no action
for it and its last change is older than what the projection heard (docs/reconciliation.md) — a server
never heard of created with its past (launched active, offloaded by its shelve action), and the next
run to find nothing left to correct.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from tally_pipeline.services import queries
from tally_pipeline.store import open_store
from tally_pipeline_tests.providers.openstack.openstack_cloud import NOW, SDK_NOISE, SMALL, T0, record, running_fake
from tally_pipeline_tests.providers.openstack.sync_cli import known, query, tally_sync, write_config

pytestmark = SDK_NOISE
CLOUD = "region-one"


def statuses(database: str, rid: str) -> list[tuple]:
    store = open_store(database)
    try:
        return [(i["start"], i["end"], i["platform_status"]) for i in queries.lifecycle(store, CLOUD, "instance", rid)]
    finally:
        store.close()


@pytest.mark.slow
def test_power_states_reach_the_history_and_converge(tmp_path, store_url) -> None:
    database = store_url
    open_store(database, migrate=True).close()
    listed = {
        "srv-stopped": record("instance", "srv-stopped", SMALL, "SHUTOFF", minute=1),
        "srv-suspended": record("instance", "srv-suspended", SMALL, "SUSPENDED", minute=2),
        "srv-paused": record("instance", "srv-paused", SMALL, "PAUSED", minute=3),
        "srv-shelved": record("instance", "srv-shelved", SMALL, "SHELVED", minute=4),
        "srv-offloaded": record("instance", "srv-offloaded", SMALL, "SHELVED_OFFLOADED", minute=5),
        "srv-started": record("instance", "srv-started", SMALL, "ACTIVE", minute=6),
        "srv-running": record("instance", "srv-running", SMALL, "ACTIVE", minute=7),
        "srv-unheard": record("instance", "srv-unheard", SMALL, "SHELVED_OFFLOADED", minute=8),
    }
    heard_active = [record("instance", rid, SMALL, "ACTIVE", minute=n)
                    for n, rid in enumerate(["srv-stopped", "srv-suspended", "srv-paused", "srv-shelved",
                                             "srv-offloaded", "srv-running"], start=1)]
    heard = T0 + timedelta(hours=1)  # after every listed server's last change
    known(database, CLOUD, *heard_active, record("instance", "srv-started", SMALL, "SHUTOFF", minute=6), at=heard)
    shelved = T0 + timedelta(hours=2)
    with running_fake(list(listed.values())) as fake:
        fake.act("srv-unheard", "shelve", at=shelved, finish=shelved + timedelta(seconds=9))
        config = write_config(tmp_path, fake, cloud=CLOUD, database=database,
                              cloud_options={"resource_types": ["instance"]})
        code, run, out = tally_sync(config, CLOUD, at=NOW, run_key="tick:power")
        assert code == 0 and run["status"] == "succeeded", out
        updates = dict(query(database, "SELECT resource_id, payload FROM events WHERE event_type = 'sync.update'"))
        creates = dict(query(database, "SELECT resource_id, payload FROM events WHERE event_type = 'sync.create'"))
        again_code, again, again_out = tally_sync(config, CLOUD, at=NOW, run_key="tick:power-again")
    status_of = lambda payload: (payload if isinstance(payload, dict) else __import__("json").loads(payload))["status"]  # noqa: E731
    assert {rid: status_of(p) for rid, p in updates.items()} == {
        "srv-stopped": "shutoff", "srv-suspended": "suspended", "srv-paused": "paused", "srv-shelved": "shelved",
        "srv-offloaded": "shelved_offloaded", "srv-started": "active", "srv-unheard": "shelved_offloaded"}
    assert {rid: status_of(p) for rid, p in creates.items()} == {"srv-unheard": "active"}
    assert run["updated"] == 6 and run["created"] == 1
    assert statuses(database, "srv-stopped") == [(heard, NOW, "active"), (NOW, None, "shutoff")]
    assert statuses(database, "srv-started") == [(heard, NOW, "shutoff"), (NOW, None, "active")]
    assert statuses(database, "srv-running") == [(heard, None, "active")]
    offloaded = shelved + timedelta(seconds=9)
    assert statuses(database, "srv-unheard") == [(listed["srv-unheard"].created_at, offloaded, "active"),
                                                 (offloaded, None, "shelved_offloaded")]
    assert run["per_type"]["instance"]["dated_by"] == {"action": 1, "poll": 6}
    # converged: the second run finds every status in step
    assert again_code == 0 and again["status"] == "succeeded", again_out
    assert (again["created"], again["updated"], again["deleted"]) == (0, 0, 0)
