"""Generate the ground truth of a simulation: every resource's lifecycle, sizes and status history.

All randomness comes from the one ``random.Random`` passed in, consumed in a fixed order (cloud by
cloud, type by type, warm resources first, then arrivals), so a spec and a seed fix the result.
Times are whole seconds from the window's start (negative for the warm cloud's past).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from tally_pipeline.providers.simulated.spec import Seconds, SimulationSpec, TransitionTimes
from tally_pipeline.providers.simulated.truth import (
    POWER_STATUSES,
    GroundTruth,
    Interval,
    Lifecycle,
    Phase,
    power_class,
)

# name, vcpus, ram_mb, disk_gb
FLAVORS: tuple[tuple[str, int, int, int], ...] = (
    ("m1.tiny", 1, 512, 1),
    ("m1.small", 1, 2048, 20),
    ("m1.medium", 2, 4096, 40),
    ("m1.large", 4, 8192, 80),
    ("m1.xlarge", 8, 16384, 160),
)
VOLUME_SIZES_GB: tuple[int, ...] = (1, 5, 10, 20, 50, 100, 250, 500)
VOLUME_TYPES: tuple[str, ...] = ("standard", "ssd")
IMAGE_BYTES: tuple[int, int] = (50_000_000, 12_000_000_000)
_NAME_PREFIX = {"instance": "vm", "volume": "vol", "image": "img", "load_balancer": "lb"}
_SETTLE_MARGIN = 60  # seconds every lifetime keeps beyond its create and delete transitions
#: A power episode lasts from ten minutes to six hours, and ends this long before the next change.
POWER_EPISODE: tuple[int, int] = (600, 6 * 3600)
_POWER_SHOWN = {status: status.upper() for status in POWER_STATUSES}


def random_uuid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def _flavor_size(flavor: tuple[str, int, int, int]) -> dict[str, Any]:
    name, vcpus, ram_mb, disk_gb = flavor
    return {"flavor_name": name, "vcpus": vcpus, "ram_mb": ram_mb, "disk_gb": disk_gb}


@dataclass
class _CloudContext:
    """Per-cloud constants drawn once: projects, the public network, load balancer flavors."""

    name: str
    projects: tuple[str, ...]
    public_network: str
    lb_flavors: tuple[str | None, ...]
    names: dict[str, int] = field(default_factory=dict)
    ids: set[str] = field(default_factory=set)

    @classmethod
    def draw(cls, name: str, spec: SimulationSpec, rng: random.Random) -> _CloudContext:
        projects = tuple(f"{rng.getrandbits(128):032x}" for _ in range(spec.projects))
        network = random_uuid(rng)
        lb_flavors = (random_uuid(rng), random_uuid(rng), None)
        return cls(name, projects, network, lb_flavors)

    def next_name(self, resource_type: str) -> str:
        n = self.names.get(resource_type, 0) + 1
        self.names[resource_type] = n
        if resource_type == "floating_ip":
            return f"198.18.{(n // 254) % 256}.{n % 254 + 1}"  # the address is a floating IP's name
        return f"{_NAME_PREFIX[resource_type]}-{n:05d}"

    def new_id(self, rng: random.Random) -> str:
        while True:
            candidate = random_uuid(rng)
            if candidate not in self.ids:
                self.ids.add(candidate)
                return candidate


@dataclass
class _Draft:
    """A lifecycle under construction, in seconds from the window's start."""

    created: int
    death: int | None
    phases: list[tuple[int, str, str | None]] = field(default_factory=list)
    sizes: list[tuple[int, dict[str, Any]]] = field(default_factory=list)


def _draw(rng: random.Random, span: Seconds) -> int:
    return rng.randint(span[0], span[1])


def _windows(rng: random.Random, rate_per_hour: float, low: int, limit: int, horizon: int | None,
             duration: Callable[[], int]) -> Iterator[tuple[int, int]]:
    """Non-overlapping update windows ``(begin, finish)``: Poisson starts from ``low``, each starting
    before ``limit`` (the window's end) and finishing before ``horizon`` (the delete transition)."""
    if rate_per_hour <= 0:
        return
    rate = rate_per_hour / 3600.0
    t = float(low)
    while True:
        t += rng.expovariate(rate)
        begin = int(t)
        if begin >= limit:
            return
        finish = begin + duration()
        if horizon is not None and finish >= horizon:
            return
        yield begin, finish
        t = float(finish)


def _instance(rng: random.Random, ctx: _CloudContext, tr: TransitionTimes, d: _Draft, rate: float, limit: int) -> None:
    flavor = rng.choice(FLAVORS)
    build = _draw(rng, tr.instance_build)
    delete = _draw(rng, tr.instance_delete) if d.death is not None else 0
    horizon = None if d.death is None else d.death - delete
    d.phases += [(d.created, "BUILD", "spawning"), (d.created + build, "ACTIVE", None)]
    d.sizes.append((d.created, _flavor_size(flavor)))
    steps: list[int] = []

    def resize_length() -> int:
        steps[:] = [_draw(rng, tr.instance_resize), _draw(rng, tr.instance_verify)]
        return sum(steps)

    for begin, finish in _windows(rng, rate, max(d.created + build, 0), limit, horizon, resize_length):
        d.phases += [(begin, "RESIZE", "resize_migrating"), (begin + steps[0], "VERIFY_RESIZE", None),
                     (finish, "ACTIVE", None)]
        flavor = rng.choice([f for f in FLAVORS if f != flavor])
        # As nova: the server runs on the new flavor from finish_resize (VERIFY_RESIZE) on; the
        # confirm only frees the old host.
        d.sizes.append((begin + steps[0], _flavor_size(flavor)))
    if horizon is not None:
        d.phases.append((horizon, "ACTIVE", "deleting"))  # nova has no DELETING status


def _volume(rng: random.Random, ctx: _CloudContext, tr: TransitionTimes, d: _Draft, rate: float, limit: int) -> None:
    gb = rng.choice(VOLUME_SIZES_GB)
    volume_type = rng.choice(VOLUME_TYPES)
    settled = "in-use" if rng.random() < 0.6 else "available"
    create = _draw(rng, tr.volume_create)
    delete = _draw(rng, tr.volume_delete) if d.death is not None else 0
    horizon = None if d.death is None else d.death - delete
    d.phases += [(d.created, "creating", None), (d.created + create, settled, None)]
    d.sizes.append((d.created, {"gb": gb, "volume_type": volume_type}))
    for begin, finish in _windows(rng, rate, max(d.created + create, 0), limit, horizon,
                                  lambda: _draw(rng, tr.volume_extend)):
        gb += rng.randint(1, gb)  # cinder only grows a volume
        d.phases += [(begin, "extending", None), (finish, settled, None)]
        d.sizes.append((finish, {"gb": gb, "volume_type": volume_type}))
    if horizon is not None:
        d.phases.append((horizon, "deleting", None))


def _floating_ip(rng: random.Random, ctx: _CloudContext, tr: TransitionTimes, d: _Draft, rate: float, limit: int) -> None:
    status = rng.choice(("ACTIVE", "DOWN"))
    d.phases.append((d.created, status, None))
    d.sizes.append((d.created, {"floating_network_id": ctx.public_network}))
    # Associating or releasing the address changes its status, not its size: no billing change.
    for begin, _ in _windows(rng, rate, max(d.created + 1, 0), limit, d.death, lambda: 1):
        status = "DOWN" if status == "ACTIVE" else "ACTIVE"
        d.phases.append((begin, status, None))


def _image(rng: random.Random, ctx: _CloudContext, tr: TransitionTimes, d: _Draft, rate: float, limit: int) -> None:
    queued = _draw(rng, tr.image_queued)
    upload = _draw(rng, tr.image_upload)
    active = d.created + queued + upload
    d.phases += [(d.created, "queued", None), (d.created + queued, "saving", None), (active, "active", None)]
    d.sizes += [(d.created, {"bytes": None}), (active, {"bytes": rng.randint(*IMAGE_BYTES)})]


def _load_balancer(rng: random.Random, ctx: _CloudContext, tr: TransitionTimes, d: _Draft, rate: float, limit: int) -> None:
    flavor_id = rng.choice(ctx.lb_flavors)
    create = _draw(rng, tr.load_balancer_create)
    delete = _draw(rng, tr.load_balancer_delete) if d.death is not None else 0
    horizon = None if d.death is None else d.death - delete
    d.phases += [(d.created, "PENDING_CREATE", None), (d.created + create, "ACTIVE", None)]
    d.sizes.append((d.created, {"flavor_id": flavor_id}))
    # Listener and pool changes: PENDING_UPDATE for a while, the size (flavor) stays.
    for begin, finish in _windows(rng, rate, max(d.created + create, 0), limit, horizon,
                                  lambda: _draw(rng, tr.load_balancer_update)):
        d.phases += [(begin, "PENDING_UPDATE", None), (finish, "ACTIVE", None)]
    if horizon is not None:
        d.phases.append((horizon, "PENDING_DELETE", None))


def _power_episodes(rng: random.Random, d: _Draft, rate_per_hour: float, limit: int) -> None:
    """Stop, suspend, pause or shelve-offload the server for a while, inside the stretches where it
    is active and nothing else happens (a power action waits for a resize, as nova's task states make
    it), each starting before ``limit`` and ending a margin before the next change."""
    phases = sorted(d.phases, key=lambda p: p[0])
    episodes: list[tuple[int, str, str | None]] = []
    rate = rate_per_hour / 3600.0
    for n, (begin, status, task) in enumerate(phases):
        if status != "ACTIVE" or task is not None:
            continue
        stop = phases[n + 1][0] - _SETTLE_MARGIN if n + 1 < len(phases) else None
        t = float(begin)
        while True:
            t += rng.expovariate(rate)
            start = int(t)
            if start >= limit or (stop is not None and start >= stop):
                break
            finish = start + rng.randint(*POWER_EPISODE)
            if stop is not None and finish >= stop:
                break
            episodes += [(start, _POWER_SHOWN[rng.choice(sorted(POWER_STATUSES))], None), (finish, "ACTIVE", None)]
            t = float(finish)
    d.phases = sorted(d.phases + episodes, key=lambda p: p[0])


def _versions(d: _Draft, resource_type: str) -> list[tuple[int, int | None, dict[str, Any], str | None]]:
    """``(begin, end, size, status)``: a new version at each size change and, for an instance, at
    each change of power class (a bill tells those apart); ``end`` None while alive."""
    cuts: list[tuple[int, dict[str, Any] | None, str | None]] = [(t, size, None) for t, size in d.sizes]
    if resource_type == "instance":
        cuts += [(t, None, power_class(status)) for t, status, _ in d.phases]
    cuts.sort(key=lambda c: c[0])
    out: list[list[Any]] = []
    size: dict[str, Any] | None = None
    status: str | None = None
    for t, new_size, new_status in cuts:
        size = new_size if new_size is not None else size
        status = new_status if new_status is not None else status
        if size is None:
            continue
        if out and out[-1][0] == t:
            out[-1][2], out[-1][3] = size, status
        elif not out or (out[-1][2], out[-1][3]) != (size, status):
            out.append([t, None, size, status])
    for i in range(len(out) - 1):
        out[i][1] = out[i + 1][0]
    if d.death is not None and out:
        out[-1][1] = d.death
    return [tuple(v) for v in out]


_BUILDERS = {
    "instance": _instance,
    "volume": _volume,
    "floating_ip": _floating_ip,
    "image": _image,
    "load_balancer": _load_balancer,
}


def minimum_lifetime(resource_type: str, tr: TransitionTimes) -> int:
    """The shortest lifetime: the longest create and delete transitions plus a margin."""
    longest = {
        "instance": tr.instance_build[1] + tr.instance_delete[1],
        "volume": tr.volume_create[1] + tr.volume_delete[1],
        "floating_ip": 0,
        "image": tr.image_queued[1] + tr.image_upload[1],
        "load_balancer": tr.load_balancer_create[1] + tr.load_balancer_delete[1],
    }[resource_type]
    return longest + _SETTLE_MARGIN


def population(spec: SimulationSpec) -> dict[str, int]:
    """Target live count per type: shares of ``resources``, at least one of each type when possible."""
    types = spec.resource_types
    total_share = sum(spec.profiles[t].share for t in types)
    counts: dict[str, int] = {}
    for t in types:
        share = spec.profiles[t].share
        n = round(spec.resources * share / total_share) if total_share > 0 else 0
        if n == 0 and share > 0 and spec.resources >= len(types):
            n = 1
        counts[t] = n
    return counts


def generate_truth(spec: SimulationSpec, rng: random.Random) -> GroundTruth:
    lifecycles: list[Lifecycle] = []
    counts = population(spec)
    for cloud in spec.clouds:
        ctx = _CloudContext.draw(cloud, spec, rng)
        for resource_type in spec.resource_types:
            lifecycles.extend(_lifecycles_of_type(spec, rng, ctx, resource_type, counts[resource_type]))
    return GroundTruth(lifecycles, start=spec.start, end=spec.end)


def _lifecycles_of_type(spec: SimulationSpec, rng: random.Random, ctx: _CloudContext,
                        resource_type: str, count: int) -> Iterator[Lifecycle]:
    if count <= 0:
        return
    profile = spec.profiles[resource_type]
    window = spec.window_seconds
    mean_life = profile.mean_lifetime_hours * 3600.0 / spec.churn
    min_life = minimum_lifetime(resource_type, spec.transitions)
    update_rate = profile.updates_per_hour * spec.churn
    max_age = spec.warm_max_age_hours * 3600.0

    def finish(created: int, death: int) -> Lifecycle:
        return _build(spec, rng, ctx, resource_type, created, death if death < window else None, update_rate)

    # The warm cloud: lifetimes are exponential, so a resource alive at the start has an exponential
    # remaining life whatever its age (memoryless): the population starts in its steady state.
    for _ in range(count):
        created = -max(1, int(min(rng.expovariate(1.0 / mean_life), max_age)))
        remaining = int(rng.expovariate(1.0 / mean_life))
        yield finish(created, max(remaining, created + min_life, 1))
    arrival_rate = count / mean_life
    t = 0.0
    while True:
        t += rng.expovariate(arrival_rate)
        created = int(t)
        if created >= window:
            return
        yield finish(created, created + min_life + int(rng.expovariate(1.0 / mean_life)))


def _build(spec: SimulationSpec, rng: random.Random, ctx: _CloudContext, resource_type: str,
           created: int, death: int | None, update_rate: float) -> Lifecycle:
    resource_id = ctx.new_id(rng)
    project_id = rng.choice(ctx.projects)
    name = ctx.next_name(resource_type)
    draft = _Draft(created, death)
    _BUILDERS[resource_type](rng, ctx, spec.transitions, draft, update_rate, spec.window_seconds)
    power_rate = spec.profiles[resource_type].power_changes_per_hour * spec.churn
    if resource_type == "instance" and power_rate > 0:
        # Drawn from a generator of this server's own, so adding power episodes leaves every other
        # draw of the seed (and so every other resource) as it was.
        _power_episodes(random.Random(f"{spec.seed}/power/{resource_id}"), draft, power_rate, spec.window_seconds)

    def at(offset: int) -> datetime:
        return spec.start + timedelta(seconds=offset)

    deleted_at = None if death is None else at(death)
    intervals = [Interval(at(begin), None if end is None else at(end), project_id, size, status)
                 for begin, end, size, status in _versions(draft, resource_type)]
    phases = tuple(Phase(at(t), status, task) for t, status, task in draft.phases)
    return Lifecycle(
        cloud=ctx.name,
        resource_type=resource_type,
        resource_id=resource_id,
        project_id=project_id,
        name=name,
        created_at=at(created),
        deleted_at=deleted_at,
        intervals=tuple(intervals),
        phases=phases,
    )
