"""The pure rules behind scope safety, failed builds and the bound on deferral, at their edges."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from tally_pipeline.core.platform import DeletedListing, DeletedResource, Enumerated
from tally_pipeline.core.reconcile import Settings, plan
from tally_pipeline.providers.openstack.scope import Credentials, listing_scope
from tally_pipeline.providers.openstack.statuses import never_ran
from tally_pipeline_tests.core.test_reconcile_rules import known, listed

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
BOUND = Settings(timedelta(seconds=300), 0.5, stuck_after=timedelta(hours=24))


def creds(*roles: str, project: str | None = "p1", system: bool = False) -> Credentials:
    return Credentials("tally", project, "tally", frozenset(roles), system)


@pytest.mark.parametrize("rtype, roles, all_projects", [
    ("volume", ("admin", "member", "reader"), True),
    ("volume", ("member", "reader"), False),
    ("floating_ip", ("member",), False),
    ("image", ("reader",), False),
    ("load_balancer", ("member", "load-balancer_global_observer"), True),
    ("load_balancer", ("load-balancer_admin",), True),
    ("load_balancer", ("load-balancer_observer",), False),
    ("instance", ("member",), True),  # nova answers 403 itself rather than narrowing
])
def test_which_roles_prove_an_all_projects_listing(rtype, roles, all_projects) -> None:
    scope = listing_scope(rtype, creds(*roles))
    assert scope.all_projects is all_projects, scope.detail
    assert scope.detail.startswith("insufficient_scope") is not all_projects
    if all_projects:
        assert scope.own_project == "p1"


def test_a_system_scoped_reader_proves_nothing_and_declared_roles_do() -> None:
    assert not listing_scope("volume", creds("admin", "reader", project=None, system=True)).all_projects
    assert listing_scope("volume", creds("auditor"), {"volume": ["auditor"]}).all_projects
    assert not listing_scope("image", creds("auditor"), {"volume": ["auditor"]}).all_projects


def test_the_narrowed_listing_rule_needs_an_own_project_only_listing_and_others_in_the_projection() -> None:
    projected = [known("v-own", project="p1"), known("v-other", project="p2")]
    own_only = Enumerated("volume", [listed("v-own", project="p1")], own_project="p1")
    result = plan(projected, [own_only], None, BOUND, NOW)
    assert (result.types["volume"].status, result.types["volume"].code) == ("failed", "insufficient_scope")
    assert result.pending == [] and result.corrections == []
    # an empty listing proves nothing either way; one with another project's item is not narrowed
    empty = plan(projected, [Enumerated("volume", [], own_project="p1")], None, BOUND, NOW)
    assert empty.types["volume"].status == "enumerated" and len(empty.pending) == 2
    mixed = Enumerated("volume", [listed("v-own", project="p1"), listed("v-other", project="p2")], own_project="p1")
    assert plan(projected, [mixed], None, BOUND, NOW).types["volume"].status == "enumerated"
    # without others in the projection there is nothing to miss
    alone = plan([known("v-own", project="p1")], [own_only], None, BOUND, NOW)
    assert alone.types["volume"].status == "enumerated"


def test_a_transition_longer_than_the_bound_is_booked_and_not_a_moment_sooner() -> None:
    created = NOW - timedelta(hours=48)
    at_bound = replace(listed("v1", status="maintenance", transition=True, created=created),
                       updated_at=NOW - timedelta(hours=24))
    past_bound = replace(at_bound, updated_at=NOW - timedelta(hours=24, seconds=1))
    waiting = plan([], [Enumerated("volume", [at_bound])], None, BOUND, NOW)
    assert [d.reason for d in waiting.deferrals] == ["in_transition"] and not waiting.corrections
    booked = plan([], [Enumerated("volume", [past_bound])], None, BOUND, NOW)
    assert [(c.action, c.occurred_at) for c in booked.corrections] == [("create", created)]
    assert booked.types["volume"].stuck_transition == 1
    unbounded = plan([], [Enumerated("volume", [past_bound])], None, replace(BOUND, stuck_after=None), NOW)
    assert not unbounded.corrections


def test_what_never_ran_is_neither_created_nor_recovered_nor_stuck_booked() -> None:
    assert never_ran("instance", "ERROR", launched=False) == "never_launched"
    assert never_ran("instance", "ERROR", launched=True) is None
    assert never_ran("instance", "ERROR") is None  # no launch field: no evidence
    assert never_ran("load_balancer", "PENDING_CREATE") == "never_active"
    assert never_ran("load_balancer", "PENDING_UPDATE") is None
    old = NOW - timedelta(days=3)
    failed = replace(listed("i1", rtype="instance", status="ERROR", created=old), never_ran="never_launched")
    building = replace(listed("i2", rtype="instance", status="BUILD", transition=True, created=old),
                       never_ran="never_launched")
    storm = DeletedResource("instance", "i3", "p1", {}, old, NOW - timedelta(hours=1), never_ran="never_launched")
    result = plan([], [Enumerated("instance", [failed, building])], DeletedListing(True, [storm]), BOUND, NOW)
    assert result.corrections == []
    assert result.types["instance"].never_ran == {"never_launched": 2}
    assert [(d.resource_id, d.reason) for d in result.deferrals] == [("i2", "in_transition")]
    # a lifecycle the projection holds keeps going: no delete, no size change; only its status is
    # recorded (error), and once it is, nothing more
    known_error = replace(known("i1", rtype="instance", size=failed.size), platform_status="error")
    kept = plan([known_error], [Enumerated("instance", [failed])], None, BOUND, NOW)
    assert kept.corrections == [] and kept.pending == []
    noted = plan([known("i1", rtype="instance", size=failed.size)], [Enumerated("instance", [failed])], None, BOUND,
                 NOW)
    assert [(c.action, c.status, c.size) for c in noted.corrections] == [("update", "error", failed.size)]
