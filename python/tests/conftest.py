"""Fixtures of the Python suite: the shipped model, the `snapkv` command and a passkey prompt.

SNAPKV_BIN (the command line) and SNAPKV_MODEL (models/snapkv-tiny4.gguf) are set by ctest
(python/CMakeLists.txt); run by hand:
    SNAPKV_BIN=build/snapkv SNAPKV_MODEL=models/snapkv-tiny4.gguf PYTHONPATH=build/python \
        python3 -m pytest python/tests
"""

import json
import os
import subprocess
from pathlib import Path

import pytest

import snapkv

ROOT = Path(__file__).resolve().parents[2]


def _path(var, default):
    p = Path(os.environ.get(var, ROOT / default))
    if not p.exists():
        pytest.exit(f"{var}: {p} does not exist (build the command line and set {var})", 2)
    return p


@pytest.fixture(scope="session")
def snapkv_bin():
    return str(_path("SNAPKV_BIN", "build/snapkv"))


@pytest.fixture(scope="session")
def model_path():
    return str(_path("SNAPKV_MODEL", "models/snapkv-tiny4.gguf"))


@pytest.fixture(scope="session")
def model(model_path):
    return snapkv.load(model_path, threads=2)


def run_cli(bin_path, *args, check=True, stdin=None):
    r = subprocess.run([bin_path, *args], capture_output=True, text=True, timeout=120,
                       input=stdin, env={**os.environ, "OMP_WAIT_POLICY": "passive"})
    if check and r.returncode != 0:
        raise AssertionError(f"snapkv {' '.join(args)} failed ({r.returncode}): {r.stderr}")
    return r


@pytest.fixture(scope="session")
def passkey(snapkv_bin, model_path, tmp_path_factory):
    """One passkey sample of 512 tokens (snapkv tasks gen): (prompt text, expected answer)."""
    out = tmp_path_factory.mktemp("tasks") / "passkey.jsonl"
    run_cli(snapkv_bin, "tasks", "gen", "--task", "passkey", "--n", "1", "--context", "512",
            "--seed", "7", "--tokenizer", model_path, "--out", str(out), "--quiet")
    s = json.loads(out.read_text().splitlines()[0])
    return s["context"] + s["question"] + s["answer_prefix"], s["answers"][0]
