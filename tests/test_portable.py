"""Elsewhere: each script copied alone into a project of its own; macOS and Windows as far as Python goes (no
os.sched_getaffinity there, no Unix-only modules on Windows): each script is imported afresh with both simulated and
trains a tiny run (one script per part it shares: the story's ProcgenVecEnv and the appendix's cpu_threads are the
same in all four)."""
import importlib.util
import os
import shutil
import subprocess
import sys

import pytest

from conftest import BATCH, BESIDE, ROOT, SCRIPTS, read_progress, tiny_argv


def test_each_script_copied_alone_into_an_empty_folder_trains_there(tmp_path):
    """Copying one file is enough: each script, the only file of a folder and run there as in a reader's own project
    (no PYTHONPATH, so none of its siblings can be imported), trains a tiny run into that folder's runs/. Two at a
    time, on the two cores."""
    env = {k: v for k, v in BESIDE.items() if k != "PYTHONPATH"}
    for pair in (SCRIPTS[:2], SCRIPTS[2:]):
        procs = {}
        for name in pair:
            os.mkdir(tmp_path / name)
            shutil.copy(os.path.join(ROOT, f"{name}.py"), tmp_path / name)
            argv = [sys.executable, f"{name}.py", *tiny_argv(name, "--total-timesteps", str(BATCH))]
            with open(tmp_path / f"{name}.log", "w") as log:  # a file, not a pipe: no pipe fills while it waits
                procs[name] = subprocess.Popen(argv, cwd=tmp_path / name, env=env, stdout=log,
                                               stderr=subprocess.STDOUT)
        for name, proc in procs.items():
            assert proc.wait(timeout=300) == 0, (tmp_path / f"{name}.log").read_text()
            (run_dir,) = (tmp_path / name / "runs").iterdir()
            assert [r["iteration"] for r in read_progress(run_dir)][0] == "1"


UNIX_ONLY = ("fcntl", "resource", "termios", "pwd", "grp")


def import_as_elsewhere(name, monkeypatch):
    """`name`.py imported as on macOS/Windows: os.sched_getaffinity missing, the Unix-only modules unimportable."""
    monkeypatch.delattr(os, "sched_getaffinity")
    for module in UNIX_ONLY:
        monkeypatch.setitem(sys.modules, module, None)  # `import fcntl` then raises ImportError
    spec = importlib.util.spec_from_file_location(f"{name}_elsewhere", os.path.join(ROOT, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", SCRIPTS)
def test_each_script_imports_without_unix_only_modules(name, monkeypatch):
    module = import_as_elsewhere(name, monkeypatch)
    assert module.cpu_threads() == os.cpu_count()  # all cores, with no CPU set to read


def test_a_tiny_run_trains_where_sched_getaffinity_is_missing(tmp_path, monkeypatch):
    module = import_as_elsewhere("ppo_ewma", monkeypatch)
    run_dir = module.main(tiny_argv("ppo_ewma", "--runs-dir", str(tmp_path), "--total-timesteps", str(2 * BATCH)))
    assert [r["iteration"] for r in read_progress(run_dir)] == ["1", "2"]
    assert os.path.isfile(os.path.join(run_dir, "checkpoint.pt"))
