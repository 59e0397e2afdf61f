"""A posting batch's delta computed in the database, next to the data (Postgres).

The poster's rule is ``core.ledger.plan_delta`` (with ``needs_posting`` and ``late_span``); this is
the same rule written once more in SQL, so that a batch moves no checkpoint or total through Python:
one statement reads the batch's checkpoints and totals (``usage_reads.totals_relation``), splits each
delta, inserts the postings and advances the checkpoints. A test holds it equal to the Python rule.

Only what is not a plain posting comes back: the checkpoints already at or past the clamp, the
(watermark, boundary) pairs whose late usage the split needs (folded in Python, ``ledger.late``),
the entities advanced with a zero delta or with unusable intervals, and the sums per meter.

Postgres only: DuckDB has no data-modifying ``WITH``; it posts through the Python rule.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from tally_pipeline.core.ledger import AGED_OUT, USAGE, CycleWindow, EntityKey
from tally_pipeline.core.usage import epoch_us
from tally_pipeline.store.base import UnitOfWork
from tally_pipeline.store.ledger_checkpoints import batch_range
from tally_pipeline.store.usage_reads import totals_relation
from tally_pipeline.store.usage_sql import Fragment, UsageSQL, compose, p

Key = tuple[str, str, str]


@dataclass(frozen=True, slots=True)
class Survey:
    """What locking a batch's checkpoints found that is not a plain posting."""

    settled: list[tuple[Key, datetime]]  # checkpoints at or past the clamp (their clamp), in key order
    late_spans: list[tuple[int, datetime]]  # distinct ``core.ledger.late_span`` results of the others
    exact: bool  # the range holds the batch's keys and no other


@dataclass(frozen=True, slots=True)
class LateRow:
    """``late`` for one entity whose checkpoint's ``late_span`` is ``(since, start)``."""

    key: EntityKey
    since: int
    start: datetime
    micro: int


@dataclass
class Posted:
    """What one batch's statement did."""

    advanced: int = 0  # checkpoints advanced
    unchanged: set[Key] = field(default_factory=set)  # advanced with nothing to post
    bad: list[tuple[Key, int, str]] = field(default_factory=list)  # advanced without unusable intervals, in key order
    sums: dict[str, dict[str, int]] = field(default_factory=dict)  # account -> meter -> micro-units posted
    postings: int = 0


def lock_and_survey(uow: UnitOfWork, sql: UsageSQL, keys: Sequence[EntityKey], window: CycleWindow,
                    watermark: int) -> Survey:
    """Row-lock the checkpoints in the batch's key range, in key order, returning only the unusual.

    The range may hold entities that are not in the batch (opened since the listing, or filtered
    out): they are locked and may be named here; the caller leaves them alone. Whether it holds
    exactly the batch is told by a digest of its keys, in the listing's order.
    """
    statement = compose(
        "WITH l AS MATERIALIZED (SELECT c.cloud, c.project_id, c.meter, c.clamp, c.aged_boundary, c.watermark"
        " FROM usage_checkpoints c WHERE TRUE",
        batch_range(sql, keys),
        " ORDER BY c.cloud, c.project_id, c.meter ",
        sql.lock_rows(),
        # the last branch reads every locked row, so every row in the range is locked
        ") SELECT l.cloud, l.project_id, l.meter, l.clamp, NULL::bigint, NULL::timestamptz, NULL::text FROM l"
        " WHERE l.clamp >= ",
        p(window.clamp),
        " UNION ALL SELECT DISTINCT NULL::text, NULL::text, NULL::text, NULL::timestamptz, l.watermark, l.aged_boundary,"
        " NULL::text FROM l WHERE ",
        _needs_late("l", window, watermark),
        " UNION ALL SELECT NULL, NULL, NULL, NULL, NULL, NULL, coalesce(encode(sha256(convert_to(string_agg(l.cloud"
        " || chr(31) || l.project_id || chr(31) || l.meter, chr(30) ORDER BY l.cloud, l.project_id, l.meter),"
        " 'UTF8')), 'hex'), '') FROM l ORDER BY 1, 2, 3",
    )
    settled: list[tuple[Key, datetime]] = []
    spans: list[tuple[int, datetime]] = []
    exact = False
    for cloud, project_id, meter, clamp, since, start, digest in uow.fetchall(statement.sql, statement.params):
        if digest is not None:
            exact = digest == _digest(keys)
        elif cloud is None:
            spans.append((int(since), start))
        else:
            settled.append(((cloud, project_id, meter), clamp))
    return Survey(settled, spans, exact)


def _digest(keys: Sequence[EntityKey]) -> str:
    return hashlib.sha256("\x1e".join([f"{k.cloud}\x1f{k.project_id}\x1f{k.meter}" for k in keys]).encode()).hexdigest()


def _needs_late(c: str, window: CycleWindow, watermark: int) -> Fragment:
    """``core.ledger.late_span`` is not None, for a checkpoint that needs posting (``needs_posting``).

    A NULL clamp, boundary or watermark makes the comparisons NULL: not needed, as in Python.
    """
    return compose(
        f"{c}.clamp < ", p(window.clamp),
        f" AND {c}.clamp > ", p(window.boundary),
        f" AND {c}.aged_boundary < ", p(window.boundary),
        f" AND {c}.watermark < ", p(watermark),
    )


def post_deltas(
    uow: UnitOfWork,
    stack: ExitStack,
    sql: UsageSQL,
    meters: Fragment,
    window: CycleWindow,
    cycle_id: str,
    keys: Sequence[EntityKey],
    watermark: int,
    late: Sequence[LateRow],
    *,
    exact: bool = False,
) -> Posted:
    """Post the batch's entities that need posting (``needs_posting``) and advance their checkpoints.

    Per entity, as ``core.ledger.plan_delta``: ``delta = U(clamp) − total``; ``aged_out`` is
    ``U(B) − total`` for a checkpoint posted at or before this cycle's boundary ``B``, else
    ``U(split) − aged_before + late`` (``late`` only where ``late_span`` names the row's
    ``(since, start)``); ``usage = delta − aged_out``; each non-zero one is a posting. The checkpoint
    becomes (``U(clamp)``, clamp, ``B``, ``U(B)``, ``watermark``). Call after ``lock_and_survey``;
    ``exact`` is its ``Survey.exact`` (the key range is then read without the keys being sent).
    """
    if exact:  # the key range alone, bounded exactly by a row comparison the planner estimates sanely
        checkpoints = Fragment("usage_checkpoints c")
        bound = exact_bound(keys)
    else:  # the batch's keys sent: joined with a row set of unknown size, a nested loop over the batch
        checkpoints = compose(
            sql.rows(uow, stack, "k", [("cloud", "text"), ("project_id", "text"), ("meter", "text")],
                     [[k.cloud for k in keys], [k.project_id for k in keys], [k.meter for k in keys]]),
            " JOIN usage_checkpoints c ON c.cloud = k.cloud AND c.project_id = k.project_id AND c.meter = k.meter",
        )
        bound = Fragment("")
    late_micro = _late_lookup(sql, late)
    total, before = sql.amount_to_micro("c.total"), sql.amount_to_micro("c.aged_before")
    now = datetime.now(UTC)
    same = "{a}.cloud = {b}.cloud AND {a}.project_id = {b}.project_id AND {a}.meter = {b}.meter"
    statement = compose(
        "WITH d AS MATERIALIZED (SELECT c.ctid AS row_id, c.cloud, c.project_id, c.meter, m.unit,"
        " coalesce(t.xc, 0) AS xc,"
        f" coalesce(t.xb, 0) AS xb, coalesce(t.xc, 0) - {total} AS delta, CASE WHEN c.clamp <= ",
        p(window.boundary),
        f" THEN coalesce(t.xb, 0) - {total} ELSE coalesce(t.split, 0) - {before} + CASE WHEN ",
        _needs_late("c", window, watermark),
        " THEN ",
        late_micro,
        " ELSE 0 END END AS aged, coalesce(t.n_bad, 0) AS n_bad, t.example FROM ",
        checkpoints,
        " JOIN ",
        meters,
        " ON m.meter = c.meter LEFT JOIN ",
        totals_relation(sql, meters, window, keys, "t"),
        f" ON {same.format(a='t', b='c')}"
        " WHERE (c.clamp IS NULL OR c.clamp < ",
        p(window.clamp),
        ")",
        bound,
        batch_range(sql, keys, exact=False),
        "), u AS (UPDATE usage_checkpoints AS c SET total = ",
        sql.micro_to_amount("d.xc"),
        ", clamp = ",
        p(window.clamp),
        ", aged_boundary = ",
        p(window.boundary),
        ", aged_before = ",
        sql.micro_to_amount("d.xb"),
        ", watermark = ",
        p(watermark),
        ", cycle_id = ",
        p(cycle_id),
        ", updated_at = ",
        p(now),
        # The row d read, found by its tuple id: ``lock_and_survey`` holds the rows locked, so no other
        # writer can have moved one since, and a tuple id is found without descending the key index
        # (measured: 17-34 ms against 28-46 ms for 5,000 rows; a steady cycle's batches over 100,000
        # entities 1.15-1.37 s against 1.29-1.36 s). The key stays as a guard.
        f" FROM d WHERE c.ctid = d.row_id AND {same.format(a='c', b='d')}",
        batch_range(sql, keys, exact=False),
        " RETURNING d.cloud, d.project_id, d.meter, d.unit, d.delta - d.aged AS usage, d.aged AS aged_out,"
        " d.n_bad, d.example),"
        " a AS (SELECT u.cloud, u.project_id, u.meter, u.unit, v.account, v.amount FROM u CROSS JOIN LATERAL"
        f" (VALUES ('{USAGE}', u.usage), ('{AGED_OUT}', u.aged_out)) AS v(account, amount) WHERE v.amount <> 0),"
        " i AS (INSERT INTO ledger_postings (cloud, project_id, meter, clamp, account, amount, unit, window_start,"
        " cycle_id, posted_at) SELECT a.cloud, a.project_id, a.meter, ",
        p(window.clamp),
        ", a.account, ",
        sql.micro_to_amount("a.amount"),
        ", a.unit, ",
        p(window.window_start),
        ", ",
        p(cycle_id),
        ", ",
        p(now),
        # in the key's order, as the Python path sends them: consecutive rows land on neighbouring index pages
        " FROM a ORDER BY a.cloud, a.project_id, a.meter, a.account)"
        # only what is not a plain posting comes back, and the sums
        " SELECT 'sum', NULL, NULL, a.meter, a.account, sum(a.amount), count(*) FROM a GROUP BY a.meter, a.account"
        " UNION ALL SELECT 'advanced', NULL, NULL, NULL, NULL, NULL, count(*) FROM u"
        " UNION ALL SELECT 'unchanged', u.cloud, u.project_id, u.meter, NULL, NULL, NULL FROM u"
        " WHERE u.usage = 0 AND u.aged_out = 0"
        " UNION ALL SELECT 'bad', u.cloud, u.project_id, u.meter, u.example, NULL, u.n_bad FROM u WHERE u.n_bad > 0"
        " ORDER BY 1, 2, 3, 4",
    )
    out = Posted()
    for kind, cloud, project_id, meter, text, micro, n in uow.fetchall(statement.sql, statement.params):
        if kind == "sum":
            out.sums.setdefault(text, {})[meter] = int(micro)
            out.postings += int(n)
        elif kind == "advanced":
            out.advanced = int(n)
        elif kind == "unchanged":
            out.unchanged.add((cloud, project_id, meter))
        else:
            out.bad.append(((cloud, project_id, meter), int(n), str(text)))
    return out


def exact_bound(keys: Sequence[EntityKey]) -> Fragment:
    """`` AND`` checkpoint ``c`` lies in the batch's key range, as a row comparison the planner estimates sanely.

    ``IS TRUE`` keeps the comparison a filter: as an index condition beside the range's own bounds
    (``batch_range``) it does not stop the btree's scan, which then reads every later key of the
    cloud (measured: 663 index pages for a 5,000-key range near the start, against 37), for the same estimate.
    """
    return Fragment(" AND ((c.cloud, c.project_id, c.meter) >= (%s, %s, %s) AND (c.cloud, c.project_id, c.meter)"
                    " <= (%s, %s, %s)) IS TRUE", (*keys[0], *keys[-1]))


def _late_lookup(sql: UsageSQL, late: Sequence[LateRow]) -> Fragment:
    """Checkpoint ``c``'s ``late``: the row naming its entity and its span (watermark, boundary), else 0.

    A lookup in one JSON object, cloud → project → meter → watermark → boundary (µs), rather than
    a join: the rows are usually none, sometimes a few, and a join with a row set of unknown size is
    planned as a nested loop over the batch.
    """
    if not late:
        return Fragment("0")
    lookup: dict[str, Any] = {}
    for r in late:
        spans = lookup.setdefault(r.key.cloud, {}).setdefault(r.key.project_id, {}).setdefault(r.key.meter, {})
        spans.setdefault(str(r.since), {})[str(epoch_us(r.start))] = str(r.micro)
    path = f"-> c.cloud -> c.project_id -> c.meter -> c.watermark::text ->> {sql.us('c.aged_boundary')}::text"
    return Fragment(f"coalesce((%s::jsonb {path})::numeric, 0)", (orjson.dumps(lookup).decode(),))


def missing(uow: UnitOfWork, keys: Sequence[EntityKey]) -> list[EntityKey]:
    """The keys that have no checkpoint row (rare: a batch found fewer rows than it expected)."""
    have = {
        (c, pr, m) for c, pr, m in uow.fetchall(
            "SELECT cloud, project_id, meter FROM usage_checkpoints WHERE (cloud, project_id, meter) IN"
            " (SELECT * FROM unnest(%s::text[], %s::text[], %s::text[]))",
            ([k.cloud for k in keys], [k.project_id for k in keys], [k.meter for k in keys]),
        )
    }
    return [k for k in keys if (k.cloud, k.project_id, k.meter) not in have]
