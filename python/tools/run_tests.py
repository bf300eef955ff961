#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Run the Python package's pytest suite with an interpreter that has numpy
and pytest, making one when needed (the CTest test `python` calls this).

    run_tests.py --env DIR [--] PYTEST_ARGS...

The interpreter is, in order: $QKVFUSE_PYTHON; this Python, when it already
imports numpy and pytest (e.g. a GPU machine with them preinstalled and no
network); DIR/bin/python from an earlier run; or a new virtual environment in
DIR (with the system's site packages visible, so an installed torch is used)
filled from PyPI with `pip install numpy pytest`. Every step has a time
limit: without PyPI the test fails after at most a few minutes with a message
that says what to do, instead of hanging. Needs only the standard library.
"""
import argparse
import os
import subprocess
import sys

REQUIREMENTS = ["numpy>=1.21", "pytest>=7"]
CHECK = "import numpy, pytest"


def log(msg):
    print("run_tests: " + msg, flush=True)


def works(python, env=None):
    try:
        return subprocess.run([python, "-c", CHECK], capture_output=True, timeout=120, env=env).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def run(cmd, timeout, env=None):
    log("$ " + " ".join(cmd))
    try:
        return subprocess.run(cmd, timeout=timeout, env=env).returncode == 0
    except subprocess.TimeoutExpired:
        log("timed out after %d s" % timeout)
    except OSError as e:
        log("could not run it: %s" % e)
    return False


def pip_install(python, extra=(), env=None):
    return run([python, "-m", "pip", "install", "--disable-pip-version-check", "--no-input", "--timeout", "60",
                "--retries", "2", *extra, *REQUIREMENTS], timeout=900, env=env)


def interpreter(env_dir):
    """(python executable, environment variables) with numpy and pytest."""
    env = dict(os.environ)
    forced = os.environ.get("QKVFUSE_PYTHON")
    if forced:
        if not works(forced):
            sys.exit("run_tests: $QKVFUSE_PYTHON=%s cannot import numpy and pytest" % forced)
        return forced, env
    if works(sys.executable):
        return sys.executable, env
    bindir = "Scripts" if os.name == "nt" else "bin"
    venv_python = os.path.join(env_dir, bindir, "python")
    if os.path.exists(venv_python) and works(venv_python):
        return venv_python, env
    # 1. a virtual environment filled from PyPI
    if run([sys.executable, "-m", "venv", "--system-site-packages", env_dir], timeout=300) \
            and pip_install(venv_python) and works(venv_python):
        return venv_python, env
    # 2. no venv module (Debian without python3-venv): pip --target into a folder
    target = os.path.join(env_dir, "site")
    env["PYTHONPATH"] = target + os.pathsep + env.get("PYTHONPATH", "")
    if pip_install(sys.executable, ["--target", target]) and works(sys.executable, env):
        return sys.executable, env
    sys.exit("run_tests: could not get numpy and pytest: installing them from PyPI failed (see above). "
             "Make PyPI reachable, or install them for %s (python3 -m pip install numpy pytest), or point "
             "QKVFUSE_PYTHON at an interpreter that has them." % sys.executable)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--env", required=True, help="folder for the virtual environment, if one is needed")
    ap.add_argument("pytest_args", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    args = a.pytest_args[1:] if a.pytest_args[:1] == ["--"] else a.pytest_args
    python, env = interpreter(a.env)
    env.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    log("python: %s; library: %s" % (python, env.get("QKVFUSE_LIBRARY", "(package search)")))
    cmd = [python, "-m", "pytest", "-p", "no:cacheprovider", *args]
    log("$ " + " ".join(cmd))
    sys.stdout.flush()
    return subprocess.call(cmd, env=env)


if __name__ == "__main__":
    sys.exit(main())
