"""The package's layout: layers import only downward, no module reaches into another's private
names, no module is too long to read."""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1] / "jaxrot"
#: the layers, bottom first; a module may import from its own layer and the ones below
LAYERS = ["geometry", "physics", "integrators", "kernels", "driver", "studies", "present"]
MODULES = sorted(p for p in ROOT.rglob("*.py") if "__pycache__" not in p.parts)
MAX_LINES = 450


def _layer(dotted: str):
    parts = dotted.split(".")
    if parts[0] != "jaxrot" or len(parts) < 2:
        return None
    return LAYERS.index(parts[1]) if parts[1] in LAYERS else None


def _imports(path: pathlib.Path):
    """``(line, absolute module, imported names)`` of every import in ``path`` (functions included)."""
    package = ".".join(("jaxrot",) + path.relative_to(ROOT).parent.parts)
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            names = [a.name for a in node.names]
            if module == "jaxrot" and all((ROOT / n).is_dir() or (ROOT / f"{n}.py").exists() for n in names):
                for n in names:  # ``from .. import integrators``: the sub-package, not the __init__
                    yield node.lineno, f"jaxrot.{n}", []
                continue
            yield node.lineno, module, names
        elif isinstance(node, ast.Import):
            for a in node.names:
                yield node.lineno, a.name, []


def _rel(p):
    return str(p.relative_to(ROOT.parent))


@pytest.mark.parametrize("path", MODULES, ids=_rel)
def test_module_is_short(path):
    assert len(path.read_text().splitlines()) <= MAX_LINES


@pytest.mark.parametrize("path", MODULES, ids=_rel)
def test_imports_only_downward_and_no_private_names(path):
    here = _layer(".".join(("jaxrot",) + path.relative_to(ROOT).parts[:1]))
    bad = []
    for line, module, names in _imports(path):
        if not module.startswith("jaxrot"):
            continue
        there = _layer(module)
        if here is not None and there is not None and there > here:
            bad.append(f"line {line}: {module} is above {LAYERS[here]}")
        if here is not None and module == "jaxrot" and LAYERS[here] != "present":
            # the presentation layer (the command line) is a user of the public API
            bad.append(f"line {line}: imports the package __init__ (upward)")
        own = ".".join(("jaxrot",) + path.relative_to(ROOT).with_suffix("").parts)
        private = [n for n in names if n.startswith("_") and n != "__version__"]
        if private and module != own and not module.endswith("._base") and not module.endswith("._common"):
            bad.append(f"line {line}: private {private} from {module}")
    assert not bad, bad
