"""Nothing lost in the run folder: a full disk while checkpointing, a damaged checkpoint, SIGTERM during a resume
(all four scripts share this appendix code; ppo.py stands for them, ppo_ewma.py in the SIGHUP test)."""
import os
import signal
import subprocess
import sys

import pytest
import torch

from conftest import BATCH, ROOT, copy_run, load, read_progress, started, tiny_argv


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_full_disk_while_checkpointing_keeps_the_last_checkpoint_the_rows_and_no_tmp(finished_ppo, tmp_path):
    """checkpoint.pt.tmp points at /dev/full, whose every write fails with ENOSPC: the resumed run stops at its first
    checkpoint with torch's error; the old checkpoint and every row are intact, no .tmp is left, the next resume
    works."""
    ppo = load("ppo")
    run_dir = copy_run(finished_ppo, tmp_path)
    checkpoint = open(os.path.join(run_dir, "checkpoint.pt"), "rb").read()
    os.symlink("/dev/full", os.path.join(run_dir, "checkpoint.pt.tmp"))
    full = subprocess.run([sys.executable, os.path.join(ROOT, "ppo.py"), "--resume", run_dir, "--total-timesteps",
                           str(3 * BATCH)], capture_output=True, text=True)  # a process of its own, as a user's
    assert full.returncode == 1 and "RuntimeError" in full.stderr  # torch.save's writer: "unexpected pos"
    assert not os.path.lexists(os.path.join(run_dir, "checkpoint.pt.tmp"))
    assert open(os.path.join(run_dir, "checkpoint.pt"), "rb").read() == checkpoint
    assert [r["iteration"] for r in read_progress(run_dir)] == ["1", "2", "3"]  # iteration 3's row was written
    assert ppo.main(["--resume", run_dir, "--total-timesteps", str(3 * BATCH)]) == run_dir  # the disk has room again
    assert [r["iteration"] for r in read_progress(run_dir)] == ["1", "2", "3"]  # row 3 once: it ran again


def test_a_damaged_checkpoint_on_resume_names_the_file_and_the_way_out(finished_ppo, tmp_path, capsys):
    run_dir = copy_run(finished_ppo, tmp_path)
    path = os.path.join(run_dir, "checkpoint.pt")
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)  # a checkpoint cut short
    with pytest.raises(SystemExit) as exit_info:
        load("ppo").main(["--resume", run_dir, "--total-timesteps", str(3 * BATCH)])
    err = capsys.readouterr().err  # one line on stderr and exit code 2, as for a bad argument
    assert exit_info.value.code == 2 and err.count("\n") == 1
    assert err.startswith(f"ppo.py: error: cannot read {path}") and err.strip().endswith("or start a new run")


def test_a_resume_of_a_finished_run_says_it_is_done_and_trains_nothing(finished_ppo, tmp_path, capsys):
    """Without a larger --total-timesteps a finished run has nothing left: its header line says so."""
    run_dir = copy_run(finished_ppo, tmp_path)
    assert load("ppo").main(["--resume", run_dir]) == run_dir
    out = capsys.readouterr().out
    assert f"2 iterations = {2 * BATCH:,} steps (2 done); run folder {run_dir}" in out and "iter " not in out
    assert [r["iteration"] for r in read_progress(run_dir)] == ["1", "2"]


def test_sigterm_during_a_resume_saves_and_the_run_goes_on_from_there(finished_ppo, tmp_path, monkeypatch, capsys):
    """A SIGTERM as the resumed run's first rollout begins: that iteration ends, is saved, and the resume command is
    printed."""
    ppo, run_dir = load("ppo"), copy_run(finished_ppo, tmp_path)
    real_rollout = ppo.collect_rollout

    def rollout(*args):  # a SIGTERM as from `kill`, once
        monkeypatch.setattr(ppo, "collect_rollout", real_rollout)
        os.kill(os.getpid(), signal.SIGTERM)
        return real_rollout(*args)
    monkeypatch.setattr(ppo, "collect_rollout", rollout)
    with pytest.raises(SystemExit) as stop:
        ppo.main(["--resume", run_dir, "--total-timesteps", "1000000"])
    assert stop.value.code == 128 + signal.SIGTERM
    assert torch.load(os.path.join(run_dir, "checkpoint.pt"), weights_only=True)["iteration"] == 3
    assert "Stopped (SIGTERM), checkpoint of iteration 3: resume with python" in capsys.readouterr().out


def wait_for(proc, prefix):
    for line in proc.stdout:
        if line.startswith(prefix):
            return line
    raise AssertionError(f"{prefix!r} never came: {proc.stderr.read()[-2000:]}")


def test_a_second_writer_of_a_run_folder_is_refused_while_the_first_lives(tmp_path, capsys, request):
    """One writer per run folder: a resume of a run that still trains stops in one line before anything is written; once
    the first process has gone, however it ended (here kill -9), the same resume works. The first run holds as its third
    iteration begins, once the second's row and checkpoint are written, so the resume reads a whole checkpoint, and the
    first cannot finish its 5 iterations and let go before the resume has tried."""
    ppo = load("ppo")
    proc = started("ppo", tiny_argv("ppo", "--runs-dir", str(tmp_path), "--total-timesteps", str(5 * BATCH),
                                    "--save-interval", "1"), at_rollout="3,hold")
    request.addfinalizer(proc.kill)  # a failed check below must not leave it holding for ever
    wait_for(proc, "holding as rollout 3 begins")
    run_dir = os.path.join(tmp_path, os.listdir(tmp_path)[0])
    with pytest.raises(SystemExit) as refused:
        ppo.main(["--resume", run_dir])
    err = capsys.readouterr().err
    assert refused.value.code == 2 and err.count("\n") == 1 and "is in use by another process" in err
    proc.kill()
    proc.wait(timeout=60)
    assert ppo.main(["--resume", run_dir]) == run_dir and len(read_progress(run_dir)) == 5


@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="no SIGHUP on this OS")
def test_sighup_stops_a_run_as_sigterm_does_and_nohup_keeps_it_going(tmp_path, monkeypatch, capsys, request):
    """A closed terminal (SIGHUP) after iteration 1's row: the iteration finishes, a checkpoint is saved, and the
    resume command is printed with absolute paths (it works from any folder; the run was started in tmp_path with
    the default runs/). Under nohup (SIGHUP ignored when the run starts) the same SIGHUP leaves the run going to
    its end, and SIGHUP still ignored after it."""
    def hung_up(script):  # a SIGHUP as from a closed terminal, after iteration 1's row
        real_log = script.log_iteration

        def log(run_dir, args, device, iteration, *rest):
            row = real_log(run_dir, args, device, iteration, *rest)
            if iteration == 1:
                os.kill(os.getpid(), signal.SIGHUP)
            return row
        monkeypatch.setattr(script, "log_iteration", log)
        return script

    monkeypatch.chdir(tmp_path)
    handler = signal.getsignal(signal.SIGHUP)
    request.addfinalizer(lambda: signal.signal(signal.SIGHUP, handler))
    signal.signal(signal.SIGHUP, signal.SIG_DFL)  # a terminal's run, even in a suite started under nohup
    argv = tiny_argv("ppo_ewma", "--total-timesteps", str(3 * BATCH), "--save-interval", "1000")
    with pytest.raises(SystemExit) as stop:
        hung_up(load("ppo_ewma")).main(argv)
    run_dir = os.path.join(tmp_path, "runs", os.listdir(tmp_path / "runs")[0])
    out = capsys.readouterr().out
    assert stop.value.code == 128 + signal.SIGHUP and "Stopped (SIGHUP), checkpoint of iteration 1" in out
    assert f"resume with python {os.path.join(ROOT, 'ppo_ewma.py')} --resume {run_dir}" in out
    assert "ewma" in torch.load(os.path.join(run_dir, "checkpoint.pt"), weights_only=True)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as nohup starts a run
    nohup = load("ppo_ewma").main(argv + ["--runs-dir", "x"])  # started under nohup, hung up after iteration 1
    assert [r["iteration"] for r in read_progress(nohup)] == ["1", "2", "3"]
    assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN  # left as found, not as the first run found it
