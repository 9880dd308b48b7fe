"""macOS and Windows as far as Python goes: no os.sched_getaffinity there, no Unix-only modules on Windows. Each
script is imported afresh with both simulated and trains a tiny run (one script per part it shares: the story's
ProcgenVecEnv and the appendix's cpu_threads are the same in all four)."""
import importlib.util
import os
import sys

import pytest

from conftest import BATCH, ROOT, SCRIPTS, read_progress, tiny_argv

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
