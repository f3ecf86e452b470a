"""The shape of the package: no import cycle inside the driver (imports inside functions included),
modules of at most 450 lines, results built without writing to frozen modules, the public
sub-namespaces importable as modules, and `import jaxrot` light."""

import ast
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1] / "jaxrot"


def _imports(path: pathlib.Path, package: str) -> set[str]:
    """Every jaxrot module ``path`` imports, at the top or inside functions (relative imports resolved)."""
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            names = [mod] + [f"{mod}.{a.name}" for a in node.names]
            out.update(n for n in names if n.startswith("jaxrot"))
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("jaxrot"))
    return out


def _module_graph(folder: pathlib.Path) -> dict[str, set[str]]:
    mods = {}
    for p in folder.rglob("*.py"):
        rel = p.relative_to(ROOT.parent).with_suffix("")
        name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        package = name if rel.name == "__init__" else name.rsplit(".", 1)[0]
        mods[name] = _imports(p, package)
    return {m: {d for d in deps if d in mods and d != m} for m, deps in mods.items()}


def _cycle(graph):
    state, stack = {}, []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                return stack[stack.index(d):] + [d]
            if d not in state:
                found = visit(d)
                if found:
                    return found
        state[m] = 2
        stack.pop()
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return None


def test_no_import_cycle_inside_the_driver():
    graph = _module_graph(ROOT / "driver")
    # a package's __init__ re-exports its modules: an edge from a module to its own package's
    # __init__ is the cycle to catch, so packages stay in the graph
    assert _cycle(graph) is None, " -> ".join(_cycle(graph))


def test_the_cycle_check_can_fail():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_modules_are_at_most_450_lines():
    long = {str(p.relative_to(ROOT)): n for p in ROOT.rglob("*.py") if (n := len(p.read_text().splitlines())) > 450}
    assert not long, long


def test_results_are_not_patched_after_they_are_built():
    hits = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*.py") if "object.__setattr__" in p.read_text()]
    assert not hits, hits


@pytest.mark.parametrize("stmt", ["import jaxrot.problems as m; m.get", "from jaxrot.exact import free_flow",
                                  "from jaxrot.torques import FreeTorque", "import jaxrot.reference as m; m.reference_solution",
                                  "from jaxrot.fitting import fit_inertia", "import jaxrot.maps as m; m.convergence_map",
                                  "from jaxrot.so3 import exp", "import jaxrot.analysis as m; m.observed_order"])
def test_public_sub_namespaces_are_modules(stmt):
    r = subprocess.run([sys.executable, "-c", stmt], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]


def test_import_jaxrot_loads_no_optax_studies_or_kernel_generators():
    code = ("import sys, jaxrot; print(sorted(m for m in ('optax', 'warp', 'jaxrot.studies.fitting', "
            "'jaxrot.studies.maps', 'jaxrot.kernels', 'jaxrot.kernels.transpile') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "[]", r.stdout
    # and they load when used
    code = "import sys, jaxrot; jaxrot.fitting; jaxrot.suggest; print('optax' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "True"


def test_deprecated_names_are_not_public_but_still_work():
    import warnings

    import jaxrot

    for name in ("simulate_batch", "final_state", "simulate_adaptive", "simulate_to_tolerance", "PAIRS"):
        assert name not in jaxrot.__all__
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            assert getattr(jaxrot, name) is not None
        if name == "PAIRS":
            assert any(issubclass(x.category, DeprecationWarning) for x in w)
    for name in jaxrot.__all__:
        assert getattr(jaxrot, name) is not None, name
