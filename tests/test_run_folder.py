"""Nothing lost in the run folder: a full disk while checkpointing, a damaged checkpoint, SIGTERM during a resume
(all four scripts share this appendix code; ppo.py stands for them)."""
import os
import signal
import subprocess
import sys

import pytest
import torch

from conftest import BATCH, ROOT, load, read_progress, tiny_argv


def finished_run(parent, *extra):
    """A finished 2-iteration ppo run with a checkpoint after each iteration."""
    return load("ppo").main(tiny_argv("ppo", "--runs-dir", str(parent), "--total-timesteps", str(2 * BATCH),
                                      "--save-interval", "1", *extra))


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_full_disk_while_checkpointing_keeps_the_last_checkpoint_the_rows_and_no_tmp(tmp_path):
    """checkpoint.pt.tmp points at /dev/full, whose every write fails with ENOSPC: the resumed run stops at its first
    checkpoint with torch's error; the old checkpoint and every row are intact, no .tmp is left, the next resume
    works."""
    ppo = load("ppo")
    run_dir = finished_run(tmp_path)
    checkpoint = open(os.path.join(run_dir, "checkpoint.pt"), "rb").read()
    os.symlink("/dev/full", os.path.join(run_dir, "checkpoint.pt.tmp"))
    with pytest.raises(RuntimeError):  # torch.save's writer: "unexpected pos"
        ppo.main(["--resume", run_dir, "--total-timesteps", str(3 * BATCH)])
    assert not os.path.lexists(os.path.join(run_dir, "checkpoint.pt.tmp"))
    assert open(os.path.join(run_dir, "checkpoint.pt"), "rb").read() == checkpoint
    assert [r["iteration"] for r in read_progress(run_dir)] == ["1", "2", "3"]  # iteration 3's row was written
    assert ppo.main(["--resume", run_dir, "--total-timesteps", str(3 * BATCH)]) == run_dir  # the disk has room again
    assert [r["iteration"] for r in read_progress(run_dir)] == ["1", "2", "3"]  # row 3 once: it ran again


def test_a_damaged_checkpoint_on_resume_names_the_file_and_the_way_out(tmp_path, capsys):
    run_dir = finished_run(tmp_path / "runs")
    path = os.path.join(run_dir, "checkpoint.pt")
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)  # a checkpoint cut short
    with pytest.raises(SystemExit) as exit_info:
        load("ppo").main(["--resume", run_dir, "--total-timesteps", str(3 * BATCH)])
    message = str(exit_info.value.code)  # sys.exit(message): exit code 1, one line on stderr
    assert message.startswith(f"ppo.py: error: cannot read {path}") and message.endswith("or start a new run")
    assert "\n" not in message


def test_sigterm_during_a_resume_saves_and_the_run_goes_on_from_there(tmp_path):
    run_dir = finished_run(tmp_path)
    proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "ppo.py"), "--resume", run_dir, "--total-timesteps",
                             "1000000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().startswith("ppo on starpilot")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=300) == 128 + signal.SIGTERM
    assert torch.load(os.path.join(run_dir, "checkpoint.pt"), weights_only=True)["iteration"] == 3
    assert "Stopped (SIGTERM), checkpoint of iteration 3: resume with python" in proc.stdout.read()
