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
