"""``python -m jaxrot`` runs the command-line interface."""

import subprocess
import sys

import jaxrot


def test_python_m_jaxrot_version():
    out = subprocess.run([sys.executable, "-m", "jaxrot", "--version"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"jaxrot {jaxrot.__version__}"


def test_python_m_jaxrot_without_a_command_is_a_usage_error():
    out = subprocess.run([sys.executable, "-m", "jaxrot"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "usage: jaxrot" in out.stderr
