"""The package's layering, read from the source: no import cycles, and core/ imports only core/.

Imports inside functions count too (a lazy import hides a cycle, it does not remove it); those under
``if TYPE_CHECKING:`` do not, since they never run.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import tally_pipeline

PACKAGE = Path(tally_pipeline.__file__).parent


def _module_name(path: Path) -> str:
    parts = ["tally_pipeline", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, module: str) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = {id(sub) for node in ast.walk(tree)
               if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
               for sub in ast.walk(node)}
    found: set[str] = set()
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}
    return found


def _graph() -> dict[str, set[str]]:
    paths = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {m: {d for d in _imports(p, m) if d in paths and d != m} for m, p in paths.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycles() -> None:
    assert _cycles(_graph()) == []


def test_cycle_finder_sees_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_core_imports_only_core() -> None:
    upward = {m: sorted(d for d in deps if not d.startswith("tally_pipeline.core"))
              for m, deps in _graph().items() if m.startswith("tally_pipeline.core")}
    assert {m: d for m, d in upward.items() if d} == {}


def test_core_speaks_no_providers_words() -> None:
    """A provider's words (its name, its services' names) live in providers/<name>/, never in core/."""
    from tally_pipeline.providers.openstack import SERVICE_OF_TYPE

    words = {"openstack", "keystone", *SERVICE_OF_TYPE.values()}
    said = {p.name: sorted(w for w in words if re.search(rf"\b{w}\b", p.read_text(encoding="utf-8"), re.I))
            for p in (PACKAGE / "core").rglob("*.py")}
    assert {name: found for name, found in said.items() if found} == {}


def test_each_provider_is_a_package_with_its_adapter() -> None:
    providers = sorted(p.parent.name for p in (PACKAGE / "providers").glob("*/__init__.py"))
    assert providers == ["openstack", "simulated"]
    assert all((PACKAGE / "providers" / name / "adapter.py").is_file() for name in providers)
    assert not (PACKAGE / "adapters").exists()


#: SQL lives in store/; benchmarks, fakes and the collector's own buffer keep theirs.
_SQL = re.compile(r"\b(SELECT\s+.+\s+FROM|INSERT\s+INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM|CREATE\s+TABLE)\b", re.I | re.S)
_SQL_HOMES = ("store", "bench", "fakes", "collector")


def _holds_sql(path: Path) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return any(isinstance(node, ast.Constant) and isinstance(node.value, str) and _SQL.search(node.value)
               for node in ast.walk(tree))


def test_sql_lives_in_the_store() -> None:
    outside = {_module_name(p) for p in PACKAGE.rglob("*.py")
               if p.relative_to(PACKAGE).parts[0] not in _SQL_HOMES and _holds_sql(p)}
    assert not outside, outside


def test_sql_finder_sees_sql(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text('Q = "SELECT cloud, project_id\\n FROM usage_checkpoints"\nX = "select the newest"\n')
    assert _holds_sql(module)
    module.write_text('X = "select the newest"\n')
    assert not _holds_sql(module)


def test_only_the_store_imports_database_drivers() -> None:
    drivers = ("duckdb", "psycopg", "psycopg_pool")
    importing = {m: sorted(d for d in _imports(p, m) if d.split(".")[0] in drivers)
                 for m, p in ((_module_name(p), p) for p in PACKAGE.rglob("*.py"))
                 if not m.startswith("tally_pipeline.store")}
    assert {m: d for m, d in importing.items() if d} == {}


def test_each_backend_is_a_package_of_the_same_parts() -> None:
    parts = {backend: sorted(p.stem for p in (PACKAGE / "store" / backend).glob("*.py"))
             for backend in ("duckdb", "postgres")}
    assert {"store", "projection", "fold", "usage_sql"} <= set(parts["duckdb"]) & set(parts["postgres"])


#: The layers, lowest first: a module may import its own layer and the layers below it, never above.
#: ``redaction``, ``heap`` and ``config`` are root modules every layer may need; the entry points and the
#: Dagster wiring share the top layer (their imports among themselves are held acyclic above).
LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"core", "redaction", "heap"}),
    frozenset({"store", "schemas", "config"}),
    frozenset({"providers", "fakes", "collector"}),
    frozenset({"services"}),
    frozenset({"runtime", "api", "commands", "orchestration", "defs", "bench", "demo", "demo_report",
               "definitions", "cli", "__main__"}),
)


def _layer_of(module: str) -> int:
    parts = module.split(".")
    if len(parts) == 1:  # the package's own __init__ (its version)
        return 0
    top = parts[1]
    for rank, members in enumerate(LAYERS):
        if top in members:
            return rank
    raise AssertionError(f"{module} is in no layer: add {top!r} to LAYERS")


def _upward_imports(graph: dict[str, set[str]]) -> dict[str, list[str]]:
    return {m: sorted(d for d in deps if _layer_of(d) > _layer_of(m))
            for m, deps in graph.items() if any(_layer_of(d) > _layer_of(m) for d in deps)}


def test_every_module_imports_only_its_own_layer_and_below() -> None:
    assert _upward_imports(_graph()) == {}


def test_layer_check_sees_an_upward_import() -> None:
    graph = {"tally_pipeline.store.x": {"tally_pipeline.services.y"},
             "tally_pipeline.services.y": {"tally_pipeline.store.x"}}
    assert _upward_imports(graph) == {"tally_pipeline.store.x": ["tally_pipeline.services.y"]}


def _cross_domain_imports(graph: dict[str, set[str]]) -> dict[str, list[str]]:
    """Imports from one ``defs/`` domain into another's modules (what they share lives in orchestration/)."""
    def domain(module: str) -> str | None:
        parts = module.split(".")
        return parts[2] if len(parts) > 3 and parts[1] == "defs" else None

    found = {m: sorted(d for d in deps if domain(d) not in (None, domain(m)))
             for m, deps in graph.items() if domain(m) is not None}
    return {m: deps for m, deps in found.items() if deps}


def test_no_defs_domain_imports_another() -> None:
    assert _cross_domain_imports(_graph()) == {}


def test_cross_domain_check_sees_one() -> None:
    graph = {"tally_pipeline.defs.usage.assets": {"tally_pipeline.defs.projection.refresh",
                                                  "tally_pipeline.defs.usage.schedules",
                                                  "tally_pipeline.orchestration.projection_refresh"}}
    assert _cross_domain_imports(graph) == {"tally_pipeline.defs.usage.assets": ["tally_pipeline.defs.projection.refresh"]}


def test_the_root_keeps_only_entry_points_and_wiring() -> None:
    root = sorted(p.stem for p in PACKAGE.glob("*.py"))
    # besides them, two process-wide settings every entry point shares: what logs redact, and the heap
    assert root == ["__init__", "__main__", "cli", "config", "definitions", "demo", "demo_report", "heap",
                    "redaction", "runtime"]


def _error_classes() -> list[type[BaseException]]:
    import importlib
    import inspect
    import pkgutil

    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages([str(PACKAGE)], "tally_pipeline."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for name, obj in inspect.getmembers(module, inspect.isclass):
            if (issubclass(obj, BaseException) and obj.__module__ == info.name and not name.startswith("_")):
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return [found[k] for k in sorted(found)]


def _error_tree() -> str:
    """The tree of tally's errors as docs/architecture.md draws it: a line per class, indented by depth."""
    from tally_pipeline.core.errors import TallyError

    classes = _error_classes()
    lines = []

    def walk(parent: type[BaseException], depth: int) -> None:
        children = sorted((c for c in classes if parent in c.__bases__), key=lambda c: c.__name__)
        for child in children:
            kinds = [b.__name__ for b in child.__bases__ if b is not parent and b.__module__ == "builtins"]
            where = child.__module__.removeprefix("tally_pipeline.")
            lines.append(f"{'    ' * depth}{child.__name__}" + (f" ({', '.join(kinds)})" if kinds else "")
                         + f"  — {where}")
            walk(child, depth + 1)

    lines.append("TallyError  — core.errors")
    walk(TallyError, 1)
    return "\n".join(lines)


def test_every_error_tally_raises_is_a_tally_error() -> None:
    from tally_pipeline.core.errors import TallyError

    outside = [f"{c.__module__}.{c.__name__}" for c in _error_classes() if not issubclass(c, TallyError)]
    assert outside == []


def test_the_architecture_document_draws_the_error_tree_as_it_is() -> None:
    doc = (PACKAGE.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert f"```\n{_error_tree()}\n```" in doc, _error_tree()




def test_every_tally_error_has_exactly_one_group_among_its_ancestors() -> None:
    from tally_pipeline.core.errors import GROUPS, TallyError

    members = [c for c in _error_classes() if issubclass(c, TallyError) and c is not TallyError and c not in GROUPS]
    assert len(members) >= 40  # the discovery found the package's errors, not none of them
    groups = {c: [g.__name__ for g in GROUPS if issubclass(c, g)] for c in members}
    assert {f"{c.__module__}.{c.__qualname__}": found for c, found in groups.items() if len(found) > 1} == {}
    assert {c.__qualname__ for c, found in groups.items() if not found} == set()
    assert all(g.__bases__[0] is TallyError for g in GROUPS)  # the groups are siblings, never nested


def test_a_group_keeps_the_builtin_kind_of_each_member() -> None:
    from tally_pipeline.config import ConfigError, UnknownCloud
    from tally_pipeline.core.errors import ConfigurationError, StoreError
    from tally_pipeline.core.timeutil import TimestampError
    from tally_pipeline.store.errors import StoreUnavailable

    assert issubclass(ConfigError, ConfigurationError) and issubclass(ConfigError, ValueError)
    assert issubclass(UnknownCloud, ConfigurationError) and issubclass(UnknownCloud, KeyError)
    assert issubclass(TimestampError, ValueError) and issubclass(StoreUnavailable, RuntimeError)
    assert not issubclass(ConfigurationError, ValueError)  # a group adds no kind its members lack
    assert issubclass(StoreError, RuntimeError)  # public before the groups, raised as RuntimeError
