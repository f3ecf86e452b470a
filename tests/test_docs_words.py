"""The words of the docs match the code: no deprecated spelling in the pages or in the public API's
docstrings, public paths on the API pages, and the page of how to write a method runs as printed."""

import ast
import importlib
import inspect
import pathlib
import re
import types

import pytest

import jaxrot

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"

#: every deprecated spelling (kept working with a DeprecationWarning), as a pattern, and what replaces it.
#: The key is how the spelling's own warning names it (test_every_deprecation_warning_is_listed).
DEPRECATED = {
    **{name: (rf"\b{name}\b", "jaxrot.simulate(...)") for name in jaxrot._DEPRECATED},
    "PAIRS": (r"\bPAIRS\b", "jaxrot.integrators.REGISTRY (error_order set)"),
    "SaveAt(every=": (r"\bSaveAt\([^)]*\bevery\s*=", "SaveAt(steps=k)"),
    "save_every=": (r"\bsave_every\s*=", "saveat=jaxrot.SaveAt(steps=k)"),
    "Fixed(dt)": (r"\bFixed\(\s*[^)\s]", "simulate's dt (Fixed() is the default)"),
    "Adaptive(": (r"\bAdaptive\((?:[^()]|\([^()]*\))*?\b(?:error|dt0|measure|calibration_bodies|aim)\s*=|"
                  r"\bAdaptive\(\s*[^,()=]+,\s*[^,()=]+,\s*[^,()=]+[,)]|\berror\s*=\s*[\"']global",
                  "GlobalError(Adaptive(rtol, atol), aim=..., measure=...), and simulate's dt"),
    "adjoint=": (r"\badjoint\s*=\s*[\"'](?:forward|checkpointed)[\"']", "adjoint=jaxrot.ForwardMode() / "
                                                                       "jaxrot.RecursiveCheckpointAdjoint()"),
}

def _code_lines(text: str) -> set[int]:
    """The (0-based) lines of ``text`` that are code: inside a fenced block, or indented under a
    paragraph ending in ``::`` (a docstring's ``Example::``)."""
    code, fence, literal = set(), None, False
    for i, line in enumerate(text.splitlines()):
        stripped = line.strip()
        if fence is not None:
            code.add(i)
            fence = None if stripped.startswith(fence) else fence
        elif stripped.startswith(("```", "~~~")):
            code.add(i)
            fence = stripped[:3]
        elif literal and (not stripped or line.startswith("    ")):
            code.add(i)
        else:
            literal = stripped.endswith("::")
    return code


def findings(text: str, where: str) -> list[str]:
    """The deprecated spellings in ``text``: any inside code (fenced blocks, indented ``Example::``
    blocks); in prose, any in a paragraph that does not say the spelling is deprecated (a sentence
    that names an old spelling to say it is deprecated is what a reader needs)."""
    out, code = [], _code_lines(text)
    for key, (pattern, new) in DEPRECATED.items():
        for m in re.finditer(pattern, text):
            line = text.count("\n", 0, m.start())
            start = text.rfind("\n\n", 0, m.start()) + 1
            end = text.find("\n\n", m.end())
            paragraph = text[start:len(text) if end < 0 else end]
            if line in code or "deprecat" not in paragraph.lower():
                out.append(f"{where}:{line + 1}: {m.group(0)!r} is deprecated: use {new}")
    return out


def _pages():
    pages = [ROOT / "README.md", ROOT / "figures" / "records" / "benchmarks.md"]
    pages += [p for p in sorted(DOCS.rglob("*.md")) if "figures" not in p.relative_to(DOCS).parts]
    return pages


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_page_uses_a_deprecated_spelling(page):
    assert not findings(page.read_text(), str(page.relative_to(ROOT)))


def _public_objects():
    """The public API: the names of ``jaxrot.__all__`` and the entries of the API pages, a module
    standing for its public members and a class for its public methods and properties; not the
    deprecated functions themselves."""
    seen, out = set(), []

    def add(obj, path):
        if id(obj) in seen or getattr(obj, "__module__", "") == "jaxrot.driver.deprecated":
            return
        seen.add(id(obj))
        out.append((path, obj))
        if isinstance(obj, types.ModuleType):
            for name in getattr(obj, "__all__", None) or [n for n in vars(obj) if not n.startswith("_")]:
                member = getattr(obj, name, None)
                if getattr(member, "__module__", None) == obj.__name__:
                    add(member, f"{path}.{name}")
        elif inspect.isclass(obj):
            for name, member in vars(obj).items():
                if not name.startswith("_") and (callable(member) or isinstance(member, property)):
                    add(member, f"{path}.{name}")

    for name in jaxrot.__all__:
        add(getattr(jaxrot, name), f"jaxrot.{name}")
    for page in sorted((DOCS / "api").glob("*.md")):
        for path in re.findall(r"^::: (\S+)", page.read_text(), flags=re.M):
            module, _, attr = path.rpartition(".")
            try:
                obj = importlib.import_module(path)
            except ImportError:
                obj = getattr(importlib.import_module(module), attr)
            add(obj, path)
    return out


def test_no_public_docstring_uses_a_deprecated_spelling():
    objects = _public_objects()
    assert len(objects) > 200  # the walk reached the members, not only the top-level names
    found = [f for path, obj in objects for f in findings(inspect.getdoc(obj) or "", path)]
    assert not found, "\n".join(found)


def test_the_scan_finds_what_it_is_for():
    for text in ('stepsize=jaxrot.Adaptive(1e-8, 1e-8, error="global")', "jaxrot.simulate_batch(m, ps, 0.1, 10)",
                 "jaxrot.simulate(m, p, 0.1, 10, save_every=5)", "SaveAt(every=3)", "jaxrot.Fixed(0.01)",
                 "Adaptive(1e-6, 1e-9, 'global')", "adjoint='checkpointed'", "Adaptive(rtol, atol, dt0=0.1)"):
        assert findings(text, "x"), text
        assert findings(f"Example::\n\n    {text}\n\nThis is deprecated.", "x"), text  # code: never
        assert not findings(f"The older `{text}` is deprecated.", "x")
    for text in ("jaxrot.Fixed()", "GlobalError(Adaptive(rtol, atol), measure='attitude')", "SaveAt(steps=3)",
                 "adjoint=jaxrot.ForwardMode()", "Adaptive(rtol=1e-8, atol=1e-8, max_steps=10)", "traj.final"):
        assert not findings(text, "x"), text


def _deprecation_messages():
    """The literal text of every ``warnings.warn(..., DeprecationWarning)`` in the package."""
    for path in sorted((ROOT / "jaxrot").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "warn"
                    and any(isinstance(a, ast.Name) and a.id == "DeprecationWarning" for a in node.args[1:])):
                message = node.args[0]
                parts = message.values if isinstance(message, ast.JoinedStr) else [message]
                yield path.name, "".join(p.value if isinstance(p, ast.Constant) else "{}" for p in parts)


def test_every_deprecation_warning_is_listed():
    """A new deprecated spelling needs its pattern in DEPRECATED (its warning names the key)."""
    messages = list(_deprecation_messages())
    assert len(messages) >= 7
    keys = [*DEPRECATED, "jaxrot.{}"]  # deprecated.py's warning names the function: jaxrot._DEPRECATED
    unlisted = [m for m in messages if not any(k in m[1] for k in keys)]
    assert not unlisted, unlisted


def test_api_pages_name_no_private_module():
    entries = [(page.name, path) for page in sorted((DOCS / "api").glob("*.md"))
               for path in re.findall(r"^::: (\S+)", page.read_text(), flags=re.M)]
    assert entries
    private = [e for e in entries if any(part.startswith("_") and not part.startswith("__")
                                          for part in e[1].split("."))]
    assert not private, f"title these by their public path (jaxrot.X, jaxrot.integrators.X): {private}"


def test_the_contributing_guide_method_runs_from_a_users_file():
    """The guide's method written in a user's own file runs as printed, passed to simulate as an object
    and by the name it registers, with absolute imports of the public API only (the name is removed
    again: the registry is the process's)."""
    text = (DOCS / "contributing.md").read_text()
    blocks = re.findall(r"```python\n(# my_method\.py.*?)```", text, flags=re.S)
    assert len(blocks) == 1
    block = blocks[0]
    assert not re.search(r"^\s*from \.", block, flags=re.M), "a user's file imports the public API absolutely"
    for line in re.findall(r"^(?:from|import) .*$", block, flags=re.M):
        module = line.split()[1]
        assert not any(part.startswith("_") for part in module.split(".")), line
    assert "body_euler" not in jaxrot.REGISTRY
    try:
        exec(compile(block, "docs/contributing.md: my_method.py", "exec"), {"__name__": "my_method"})
        assert jaxrot.integrators.info("body_euler").order == 1
    finally:
        jaxrot.REGISTRY.pop("body_euler", None)
