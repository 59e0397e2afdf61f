"""The demo's report: a terminal summary and a picture of the ledgers against the truth over time,
per meter and as a tenant sees it (per cloud, project and meter)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tally_pipeline.core.usage import tenant_accuracy, to_units


def picture(run: Any, path: Path) -> Path:
    """Per meter: ground truth, the reconciled ledger and the events-only ledger at each posting cycle;
    in the last panel, the tenant view: Σ |ledger − truth| per (cloud, project, meter) over the truth."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    base = run.baseline
    samples = [
        type(s)(s.at, s.clamp, _minus(s.reconciled, base.reconciled), _minus(s.events_only, base.events_only),
                _minus(s.truth, base.truth), s.tenants.minus(base.tenants) if s.tenants and base.tenants else None)
        for s in run.samples
    ]
    meters = sorted(samples[-1].truth)
    from tally_pipeline.schemas import default_registry

    units = {m.name: m.unit for m in default_registry().meters()}
    times = [s.clamp for s in samples]
    fig, axes = plt.subplots(2, 4, figsize=(18, 8), sharex=True)
    flat = axes.ravel()
    for ax, meter in zip(flat, meters):
        ax.plot(times, [float(to_units(s.truth.get(meter, 0))) for s in samples], color="black", lw=2.5,
                label="ground truth")
        ax.plot(times, [float(to_units(s.reconciled.get(meter, 0))) for s in samples], color="tab:green", lw=1.5,
                ls="--", label="ledger: events + reconciliation")
        ax.plot(times, [float(to_units(s.events_only.get(meter, 0))) for s in samples], color="tab:red", lw=1.2,
                label="ledger: events alone")
        ax.set_title(meter, fontsize=10)
        if meter in units:
            ax.set_ylabel(f"{units[meter]}s", fontsize=8)
        ax.tick_params(axis="x", labelrotation=30, labelsize=8)
        ax.tick_params(axis="y", labelsize=8)
    err = flat[len(meters)] if len(meters) < len(flat) else None
    if err is not None:
        for label, key, color in (("events alone", "events_only", "tab:red"),
                                  ("events + reconciliation", "reconciled", "tab:green")):
            errors = [tenant_accuracy(s.tenants.truth, getattr(s.tenants, key)) for s in samples if s.tenants]
            worst = errors[-1].worst if errors else None
            if worst is not None:  # in the legend, which finds a place off the curves
                project = worst.project_id if len(worst.project_id) <= 10 else worst.project_id[:8] + "…"
                label += f"\n  worst bill: {project} {worst.meter} {worst.relative:.1%}"
            err.plot(times[-len(errors):], [100 * e.abs_error for e in errors], color=color, label=label)
        # Two lines: on one, the title is wider than its panel and the figure clips it.
        err.set_title("tenant view: Σ|ledger − truth| / truth\nper (cloud, project, meter)", fontsize=9)
        err.set_ylabel("% of the usage", fontsize=8)
        err.tick_params(axis="x", labelrotation=30, labelsize=8)
        err.legend(fontsize=7, loc="best")
        for extra in flat[len(meters) + 1:]:
            extra.axis("off")
    flat[0].legend(fontsize=8, loc="upper left")
    s = run.settings
    fig.suptitle(f"tally demo: {len(run.sim.clouds)} simulated clouds, {s.hours:g} h, {s.loss:.0%} events lost, "
                 f"{s.duplicates:.0%} duplicated, seed {s.seed} — usage posted since the window began, at each cycle")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def _minus(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    return {k: v - b.get(k, 0) for k, v in a.items()}


def text(report: dict[str, Any]) -> str:
    """The report for a terminal."""
    sim, ev, cor = report["simulated"], report["events"], report["corrections"]
    lines = [
        f"tally demo — {len(sim['clouds'])} clouds ({', '.join(sim['clouds'])}), {sim['hours']:g} simulated hours "
        f"from {sim['start']}, seed {sim['seed']}",
        "",
        f"collector events: {ev['generated']} generated, {ev['lost']} lost ({sim['loss']:.0%}), {ev['duplicated']} "
        f"duplicated ({sim['duplicates']:.0%}), delivered out of order",
        f"ingest core:      {ev['stored']} stored, {ev['duplicates']} duplicates absorbed, {ev['rejected']} rejected",
        f"reconciliation:   {report['syncs']['runs']} sync runs; corrections: {cor['created']} created, "
        f"{cor['updated']} updated, {cor['deleted']} deleted, {cor['recovered']} recovered (created and deleted between syncs)",
        "deferrals:        " + (", ".join(f"{k} {v}" for k, v in report["deferrals"].items()) or "none"),
        "dagster runs:     " + ", ".join(f"{k} {v}" for k, v in report["syncs"]["dagster_runs"].items()),
        "ledger postings:  " + ", ".join(f"{k} {v}" for k, v in report["postings"].items()),
        "",
        f"usage posted during the simulated window ({sim['window'][0]} to {sim['window'][1]}, the last clamp):",
        f"  {'meter':22} {'ground truth':>16} {'ledger':>16} {'events alone':>14} {'reconciled':>12}",
        f"  {'':22} {'':>16} {'':>16} {'error':>14} {'error':>12}",
    ]
    for name, m in report["meters"].items():
        lines.append(f"  {name:22} {m['truth']:>16,.3f} {m['ledger']:>16,.3f} {m['events_only_error']:>13.3%} "
                     f"{m['reconciled_error']:>11.4%}")
    t = report["tenant"]
    lines += [
        "",
        f"as a tenant sees it ({t['entities']} bills: one per cloud, project and meter; over- and under-billing "
        "of different tenants add up, never cancel):",
        f"  Σ |ledger − truth| / truth:   events alone {t['abs_error']['events_only']:.3%}   "
        f"reconciled {t['abs_error']['reconciled']:.4%}",
    ]
    for label, key in (("events alone", "events_only"), ("reconciled", "reconciled")):
        w = t["worst"][key]
        lines.append(f"  worst bill, {label + ':':13} " + (
            f"{w['cloud']}/{w['project_id']} {w['meter']}: {w['measured']:,.3f} billed for {w['truth']:,.3f} used "
            f"({w['error']:.2%})" if w else "none off"))
    r = report["residual"]
    lines += [
        "",
        "where the residual error comes from (the design notes' known limits):",
        f"  - {r['lost_deletes_without_deletion_time']} lost deletes of volumes/floating IPs/images/load balancers: each "
        "booked at the first sync that no longer lists it (up to one 10-minute interval over-billed);",
        f"  - {r['lost_deletes_of_instances_dated_exactly']} lost instance deletes: dated exactly by nova's deleted-servers listing (no error);",
        f"  - {r['both_events_lost_and_never_listed']} non-instance resources whose create and delete were both lost "
        "between two syncs: never seen;",
        "  - lost resizes: booked at the next poll (up to one interval at the old size).",
        "",
        f"database:  {report['database']}   (events-only baseline: {report['events_only_database']})",
        f"picture:   {report['picture']}",
        f"snapshot:  {report['snapshot']}   (the asset tables as Parquet, for analysts)",
        f"dagster:   {report['dagster_log']}   (every run's log; --verbose prints it too)",
        f"took {report['seconds']} s",
    ]
    return "\n".join(lines)
