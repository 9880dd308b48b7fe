"""Nothing lost: one writer per run folder, a folder of its own for every run, a closed stdout, a full disk or a
folder that cannot be written (all four scripts share this appendix code; ppo.py stands for them)."""
import os
import signal
import subprocess
import sys

import pytest
import torch

from conftest import ROOT, TINY, load, read_progress, tiny_argv


def finished_run(parent, *extra):
    """A finished 2-iteration ppo run with a checkpoint after each iteration."""
    return load("ppo").main(tiny_argv("ppo", "--runs-dir", str(parent), "--total-timesteps", "256", "--save-model",
                                      "--save-interval", "1", *extra))


def start(*argv, **kwargs):
    """ppo.py ARGV in a subprocess, its stdout a pipe; returns it once its first line (the run's start) is out."""
    proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "ppo.py"), *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kwargs)
    first = proc.stdout.readline()
    assert first.startswith("ppo on starpilot"), first + proc.stderr.read()
    return proc


def test_a_run_folder_has_one_writer_and_a_dead_writer_never_blocks(tmp_path, bad_argument):
    run_dir = finished_run(tmp_path / "runs")
    proc = start("--resume", run_dir, "--total-timesteps", "1000000")
    try:  # the first resume trains; a second one is refused, naming the process that holds the run
        err = bad_argument("ppo", ["--resume", run_dir, "--total-timesteps", "2000000"], "--resume")
        assert f"is in use by process {proc.pid}" in err
    finally:
        proc.kill()  # SIGKILL: no clean-up at all
        proc.wait(timeout=60)
    lock = load("ppo").lock_run_folder(run_dir)  # the kernel dropped the dead process's lock
    lock.close()


def test_two_runs_started_in_the_same_second_get_folders_of_their_own(tmp_path, monkeypatch):
    ppo = load("ppo")
    args = ppo.parse_args(tiny_argv("ppo", "--runs-dir", str(tmp_path)))
    monkeypatch.setattr(ppo.time, "time", lambda: 1_700_000_000.25)
    first, second, third = (ppo.new_run_dir(args) for _ in range(3))
    assert first.endswith("starpilot__ppo__1__1700000000") and second == first + "-2" and third == first + "-3"
    assert sorted(os.listdir(tmp_path)) == sorted(os.path.basename(d) for d in (first, second, third))


def test_a_closed_stdout_never_stops_a_run(tmp_path):
    """As `python ppo.py ... | head -1`: the reader goes away after the first line; training, progress.csv and the
    checkpoints go on to the end, and the run exits 0 without a traceback."""
    proc = start(*TINY, "--total-timesteps", "384", "--save-model", "--save-interval", "1", cwd=tmp_path)
    proc.stdout.close()
    assert proc.wait(timeout=600) == 0
    assert "Traceback" not in proc.stderr.read()
    run_dir = os.path.join(tmp_path, "runs", os.listdir(os.path.join(tmp_path, "runs"))[0])
    assert [r["iteration"] for r in read_progress(run_dir)] == ["1", "2", "3"]
    assert torch.load(os.path.join(run_dir, "checkpoint.pt"), weights_only=True)["iteration"] == 3


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_full_disk_while_checkpointing_keeps_the_last_checkpoint_and_the_rows(tmp_path, capsys):
    """checkpoint.pt.tmp points at /dev/full, whose every write fails with ENOSPC: the resumed run stops at its
    first checkpoint with one line and exit code 1; the .tmp is gone, so the next resume works."""
    ppo = load("ppo")
    run_dir = finished_run(tmp_path)
    checkpoint = open(os.path.join(run_dir, "checkpoint.pt"), "rb").read()
    os.symlink("/dev/full", os.path.join(run_dir, "checkpoint.pt.tmp"))
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        ppo.main(["--resume", run_dir, "--total-timesteps", "384"])
    message = str(exit_info.value.code)  # sys.exit(message): exit code 1, the message on stderr
    assert message == f"ppo.py: cannot write to the run folder {run_dir}: no space left on device"
    assert not os.path.lexists(os.path.join(run_dir, "checkpoint.pt.tmp"))
    assert open(os.path.join(run_dir, "checkpoint.pt"), "rb").read() == checkpoint
    assert [r["iteration"] for r in read_progress(run_dir)] == ["1", "2", "3"]  # iteration 3's row was written
    assert ppo.main(["--resume", run_dir, "--total-timesteps", "384"]) == run_dir  # the disk has room again
    assert [r["iteration"] for r in read_progress(run_dir)] == ["1", "2", "3"]  # row 3 once: it ran again


def test_a_run_folder_that_cannot_be_written_is_one_line_and_exit_code_1(tmp_path):
    """Any OSError writing the folder (here progress.csv's .tmp is a folder, as a read-only file would be refused)."""
    run_dir = finished_run(tmp_path)
    os.mkdir(os.path.join(run_dir, "progress.csv.tmp"))
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "ppo.py"), "--resume", run_dir, "--total-timesteps",
                           "384"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(f"ppo.py: cannot write to the run folder {run_dir}: is a directory")
    assert [r["iteration"] for r in read_progress(run_dir)] == ["1", "2"]


def test_a_video_that_cannot_be_written_is_one_line_and_exit_code_1(tmp_path):
    run_dir = finished_run(tmp_path)
    open(os.path.join(run_dir, "videos"), "w").close()  # a file where the videos folder would go
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "ppo.py"), "--evaluate", run_dir, "--eval-episodes",
                           "1", "--capture-video"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(f"ppo.py: cannot write to the run folder {run_dir}: ")


def test_a_corrupt_checkpoint_on_resume_names_the_file_and_the_way_out(tmp_path, bad_argument):
    run_dir = finished_run(tmp_path / "runs")
    path = os.path.join(run_dir, "checkpoint.pt")
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)  # a checkpoint cut short
    err = bad_argument("ppo", ["--resume", run_dir, "--total-timesteps", "384"], path)
    assert "put back a copy of it, or start a new run" in err


def test_sigterm_during_a_resume_saves_and_releases_the_folder(tmp_path):
    run_dir = finished_run(tmp_path)
    proc = start("--resume", run_dir, "--total-timesteps", "1000000")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=300) == 128 + signal.SIGTERM
    assert int(open(os.path.join(run_dir, "run.lock")).read()) == proc.pid  # it held the lock, now free:
    load("ppo").lock_run_folder(run_dir).close()
    assert torch.load(os.path.join(run_dir, "checkpoint.pt"), weights_only=True)["iteration"] == 3
