"""The SDK installs offline, with the command its README gives."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SDK = Path(__file__).resolve().parents[1]


def test_pip_install_offline(tmp_path: Path) -> None:
    """README: /usr/bin/python3 -m venv --system-site-packages .venv, then
    .venv/bin/pip install --no-index --no-build-isolation ./sdk/python;
    the installed package carries py.typed."""
    if subprocess.run([sys.executable, "-c", "import venv, ensurepip"], capture_output=True).returncode != 0:
        pytest.skip("no venv with pip here (Debian: apt-get install python3-venv)")
    source = tmp_path / "python"
    shutil.copytree(SDK, source, ignore=shutil.ignore_patterns(".*", "build", "*.egg-info", "__pycache__", "tests"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=120)
    install = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--no-index", "--no-build-isolation", "--no-cache-dir", str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    check = "import bub_bus, pathlib; print(pathlib.Path(bub_bus.__file__).with_name('py.typed').exists())"
    out = subprocess.run([str(venv / "bin" / "python"), "-c", check], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert out.stdout.strip() == "True", out.stderr
