"""Every Python code block in the README runs as written."""

import pathlib
import re

import pytest

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_has_python_examples():
    assert BLOCKS


@pytest.mark.parametrize("i", range(len(BLOCKS)))
def test_readme_block_runs(i):
    exec(compile(BLOCKS[i], f"README.md python block {i}", "exec"), {"__name__": "__readme__"})


def test_readme_first_block_runs_in_float32_and_says_what_it_raised():
    """Without the x64 line the first example runs in float32: its tolerance of 1e-8 is raised to
    float32's floor with a PrecisionWarning before the run, and the run ends without a failure."""
    import subprocess
    import sys

    code = BLOCKS[0].replace('jax.config.update("jax_enable_x64", True)', "")
    code = "import warnings\nwarnings.simplefilter('always')\n" + code + "\nassert sol.final.R.dtype == 'float32'\n"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900,
                       env={**__import__("os").environ, "JAX_ENABLE_X64": "0"})
    assert r.returncode == 0, r.stderr[-3000:]
    assert "PrecisionWarning" in r.stderr and "float32" in r.stderr, r.stderr[-3000:]


ROOT = README.parent
MARKDOWN = [README, *sorted((ROOT / "figures").glob("*.md")), *sorted((ROOT / "docs").rglob("*.md"))]


def _cells(line: str) -> int:
    return len(re.findall(r"(?<!\\)\|", line.strip())) - 1


@pytest.mark.parametrize("path", MARKDOWN, ids=lambda p: str(p.relative_to(ROOT)))
def test_markdown_tables_have_equal_columns(path):
    """A bare '|' inside a cell (e.g. |L|) splits it and breaks the table's rendering."""
    lines, bad = path.read_text().splitlines(), []
    for k, line in enumerate(lines):
        if line.startswith("|") and k + 1 < len(lines) and re.match(r"^\|(\s*:?-+:?\s*\|)+\s*$", lines[k + 1]):
            n = _cells(line)
            j = k + 2
            while j < len(lines) and lines[j].startswith("|"):
                if _cells(lines[j]) != n:
                    bad.append(f"line {j + 1}: {_cells(lines[j])} cells, header has {n}")
                j += 1
            if _cells(lines[k]) != _cells(lines[k + 1]):
                bad.append(f"line {k + 1}: header {n} cells, separator {_cells(lines[k + 1])}")
    assert not bad, bad


def test_no_references_outside_the_repository():
    """Users cannot follow citations of the project's private spec or seed files."""
    files = [README, *(ROOT / "docs").rglob("*.md"), *(ROOT / "jaxrot").rglob("*.py"),
             *(ROOT / "experiments").glob("*.py"), *(ROOT / "examples").glob("*.py"), *(ROOT / "figures").glob("*.md")]
    hits = [f"{p.relative_to(ROOT)}:{i + 1}" for p in files for i, line in enumerate(p.read_text().splitlines())
            if re.search(r"\bSPEC\b|shared/|seeds/", line)]
    assert not hits, hits


def test_readme_tables_are_generated_from_the_registry():
    from jaxrot.present import docgen

    text = README.read_text()
    for name, render in docgen.README_BLOCKS.items():
        assert docgen.readme_block(text, name) == render(), f"stale: run python -m jaxrot.present.docgen ({name})"


def test_readme_is_short_and_speaks_to_users():
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    for word in ("session", "this issue", "the issue's", "TODO"):
        assert word not in text, word
    for link in re.findall(r"\]\(([^)#]+)\)", text):
        if not link.startswith("http"):
            assert (ROOT / link).exists(), link
