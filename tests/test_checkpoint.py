"""Long runs: checkpoint, resume, SIGTERM and non-finite values (all four scripts)."""
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest
import torch

from conftest import (BATCH, BESIDE, GPU, LEARNING_COLUMNS, ROOT, assert_same_state, copy_run, learning_columns,
                      load, read_progress, run_tiny, started, tiny_argv)
from stand_in import GLOO_LEFT


def checkpoint(run_dir, name="checkpoint.pt"):
    return torch.load(os.path.join(run_dir, name), weights_only=True)


COMPARED = LEARNING_COLUMNS + ["aux_kl", "aux_value_loss", "aux_true_value_loss"]  # all but the wall-clock columns


def same_rows(a, b):
    return [{c: r.get(c) for c in COMPARED} for r in read_progress(a)] == [{c: r.get(c) for c in COMPARED}
                                                                          for r in read_progress(b)]


def stop_resume_argv(name, folder):
    """The runs stopped and resumed here: real Procgen, staleness 1, 4 iterations, a checkpoint after each."""
    return tiny_argv(name, "--runs-dir", str(folder), "--total-timesteps", str(4 * BATCH), "--staleness", "1",
                     "--save-interval", "1")


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """uninterrupted(name): the run of stop_resume_argv that never stopped, made once for the tests that compare."""
    runs = {}

    def run(name):
        if name not in runs:
            runs[name] = load(name).main(stop_resume_argv(name, tmp_path_factory.mktemp(name)))
        return runs[name]
    return run


def test_a_run_stopped_by_sigterm_and_resumed_is_the_run_that_never_stopped(ewma_script, uninterrupted, tmp_path,
                                                                           monkeypatch, capsys):
    """Real Procgen, staleness 1, 4 iterations; a SIGTERM after iteration 3 (PPG, N_pi 2: the first iteration of the
    second phase), then --resume: every row of progress.csv and every saved tensor equal an uninterrupted run's. The
    envs' games are in the checkpoint, so the same episodes go on; so are the staleness FIFO and the aux buffer. On
    the EWMA scripts, which hold all their baselines' state and more (test_diffs.py); ppo.py and ppg.py are resumed
    exactly by the kill -9 test below."""
    name = ewma_script.__name__
    real_log = ewma_script.log_iteration
    full = uninterrupted(name)

    def log(run_dir, args, device, iteration, *rest):  # a SIGTERM as from `kill`, after the row of iteration 3
        row = real_log(run_dir, args, device, iteration, *rest)
        if iteration == 3:
            os.kill(os.getpid(), signal.SIGTERM)
        return row
    monkeypatch.setattr(ewma_script, "log_iteration", log)
    with pytest.raises(SystemExit) as stop:
        ewma_script.main(stop_resume_argv(name, tmp_path / "part"))
    part = os.path.join(tmp_path, "part", os.listdir(tmp_path / "part")[0])
    assert stop.value.code == 128 + signal.SIGTERM and checkpoint(part)["iteration"] == 3
    assert "Stopped (SIGTERM), checkpoint of iteration 3: resume with" in capsys.readouterr().out
    monkeypatch.setattr(ewma_script, "log_iteration", real_log)
    assert ewma_script.main(["--resume", part]) == part
    assert [r["iteration"] for r in read_progress(part)] == ["1", "2", "3", "4"] and same_rows(full, part)
    a, b = checkpoint(full), checkpoint(part)
    a.pop("time_s"), b.pop("time_s")
    assert_same_state(a, b)


def test_a_run_killed_by_sigkill_and_resumed_is_the_run_that_never_stopped(uninterrupted, tmp_path):
    """kill -9 of the process (no clean-up at all) as iteration 4 begins, 3's row written, the last checkpoint of 2
    (PPO saving every 2 iterations; PPG at the end of its first phase): the resume runs iteration 3 again, and every
    row then equals an uninterrupted run's. PPO and PPG run side by side."""
    parts = {name: tmp_path / name for name in ("ppo", "ppg")}
    procs = [started(name, stop_resume_argv(name, folder) + (["--save-interval", "2"] if name == "ppo" else []),
                     at_rollout="4,SIGKILL", env=BESIDE) for name, folder in parts.items()]
    assert [proc.wait(timeout=300) for proc in procs] == [-signal.SIGKILL] * 2
    for name, folder in parts.items():
        part = os.path.join(folder, os.listdir(folder)[0])
        assert checkpoint(part)["iteration"] == 2 and len(read_progress(part)) == 3
        assert load(name).main(["--resume", part]) == part and same_rows(uninterrupted(name), part)


def test_a_resumed_run_estimates_its_remaining_time_at_its_own_pace(finished_ppo, tmp_path, capsys, monkeypatch):
    """The ETA after --resume: this process's time per iteration, not the checkpoint's time_s (which may be another
    machine's). The clock moves a second a reading, so the resumed iteration takes seconds, whatever the machine's
    speed, though the first two took an hour each."""
    ppo, run_dir = load("ppo"), copy_run(finished_ppo, tmp_path)
    state = checkpoint(run_dir)
    state["time_s"] = 7200.0  # 2 iterations took an hour each
    torch.save(state, os.path.join(run_dir, "checkpoint.pt"))
    capsys.readouterr()
    monkeypatch.setattr(ppo.time, "time", itertools.count(1_800_000_000).__next__)
    ppo.main(["--resume", run_dir, "--total-timesteps", str(4 * BATCH)])
    out = capsys.readouterr().out
    assert "iter 3/4 |" in out and out.split("iter 3/4 |")[1].splitlines()[0].endswith("eta 0h00m")  # not 0h40m


def test_a_kill_right_after_resume_keeps_every_row_of_progress_csv(finished_ppo, tmp_path):
    """Killed (SIGKILL, no clean-up) as soon as the resumed run has started, progress.csv rewritten for it, before its
    first rollout: the history is all still there."""
    run_dir = copy_run(finished_ppo, tmp_path)
    before = open(os.path.join(run_dir, "progress.csv")).read()
    assert len(read_progress(run_dir)) == 2
    proc = started("ppo", ["--resume", run_dir, "--total-timesteps", "100000"], at_rollout="1,SIGKILL")
    assert proc.wait(timeout=300) == -signal.SIGKILL
    assert proc.stdout.readline().startswith("ppo on starpilot")
    assert open(os.path.join(run_dir, "progress.csv")).read() == before
    assert not os.path.exists(os.path.join(run_dir, "progress.csv.tmp"))


STAND_IN = dict(os.environ, STAND_IN_ENV="1")  # the workers' environment: exactly repeatable (stand_in.py)


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory):
    """torchrun, 2 gloo workers, the stand-in environment, PPG-EWMA with N_pi = 1 and staleness 1, 4 iterations. Side
    by side (a thread per worker): "full", a run that never stopped, "out", its console; "part", a run whose
    torchrun launcher alone was killed (kill -9) as rollout 2 began, "stopped", its console to the workers' exit,
    "at_stop", a copy of its folder then. Then side by side: "part" resumed to its end; "refused", the exit code and
    stderr of a resume of "mixed", full's folder with at_stop's rank-1 checkpoint; "disk_full", those of a resume of a
    copy of full whose rank-1 checkpoint cannot be written, and the copy; "errs", the stderr of full, of part to the
    workers' exit and of its resume. The workers run in sessions of their own, and checkpoint only as they stop and at
    the end."""
    tmp = tmp_path_factory.mktemp("two_workers")
    argv = lambda folder: tiny_argv("ppg_ewma", "--runs-dir", str(tmp / folder), "--total-timesteps",  # noqa: E731
                                    str(2 * 4 * BATCH), "--staleness", "1", "--n-pi", "1", "--save-interval", "100")
    # "part"'s workers hold as rollout 2 begins until the launcher has gone (stand_in.py); a worker says so only after
    # iteration 1's stop check, which both passed with the launcher alive: they stop at 2's end, however fast each is
    full, proc = (subprocess.Popen(torchrun_cmd("ppg_ewma", argv(folder)), stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, start_new_session=True, env=env)
                  for folder, env in (("full", STAND_IN), ("part", dict(STAND_IN, AT_ROLLOUT="2,hold"))))
    stopped = []
    for line in proc.stdout:
        stopped.append(line)
        if line.startswith("holding as rollout 2 begins"):
            proc.kill()  # the launcher only
            break
    stopped += proc.stdout.readlines()  # until every worker has closed its end of the pipe: all have exited
    proc.wait(timeout=60)
    stopped_err = proc.stderr.read()
    out, err = full.communicate(timeout=600)
    assert full.returncode == 0, err[-3000:]
    full, part = (os.path.join(tmp, folder, os.listdir(tmp / folder)[0]) for folder in ("full", "part"))
    at_stop = copy_run(part, tmp / "at_stop")
    mixed = copy_run(full, tmp / "mixed")  # rank 0's checkpoint of the last iteration beside rank 1's of the stop
    shutil.copyfile(os.path.join(at_stop, "checkpoint.rank1.pt"), os.path.join(mixed, "checkpoint.rank1.pt"))
    refused = subprocess.Popen(torchrun_cmd("ppg_ewma", ["--resume", mixed, "--total-timesteps", str(2 * 6 * BATCH)]),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=STAND_IN)
    disk_full = copy_run(full, tmp / "disk_full")  # rank 1's disk full as the run, extended, saves at its end
    os.symlink("/dev/full", os.path.join(disk_full, "checkpoint.rank1.pt.tmp"))
    failed = subprocess.Popen(torchrun_cmd("ppg_ewma", ["--resume", disk_full, "--total-timesteps",
                                                       str(2 * 6 * BATCH)]),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=STAND_IN)
    resumed = subprocess.run(torchrun_cmd("ppg_ewma", ["--resume", part]), capture_output=True, text=True, timeout=600,
                             env=STAND_IN)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    refused_err = refused.communicate(timeout=600)[1]
    failed_err = failed.communicate(timeout=600)[1]
    return {"full": full, "out": out, "errs": (err, stopped_err, resumed.stderr), "stopped": stopped,
            "at_stop": at_stop, "part": part, "mixed": mixed, "refused": (refused.returncode, refused_err),
            "disk_full": (failed.returncode, failed_err, disk_full)}


def test_two_worker_resume_continues_exactly_where_an_uninterrupted_run_goes(two_workers):
    """The run stopped as its launcher died, resumed, equals the run that never stopped in every learning column and
    every tensor of both workers' checkpoints (the first iteration only collects, so a checkpoint then holds the FIFO's
    rollout; each later one trains, then its aux phase). And the workers' run: one folder (rank 0's), one console,
    every worker's steps counted, the same learner on both."""
    full, out, part = two_workers["full"], two_workers["out"], two_workers["part"]
    err = "".join(two_workers["errs"])  # the run that never stopped, the stopped one, its resume
    assert "autograd kernel was not registered" not in err  # weights broadcast under no_grad
    assert GLOO_LEFT not in err  # each worker's process group ended by destroy_process_group (stand_in.py)
    assert len(checkpoint(two_workers["at_stop"])["stale_rollouts"]) == 1
    assert [int(r["global_step"]) for r in read_progress(part)] == [2 * BATCH * i for i in (1, 2, 3, 4)]  # 2 workers
    assert all(r["aux_kl"] != "" for r in read_progress(part)[1:])
    assert learning_columns(read_progress(full)) == learning_columns(read_progress(part))
    for name in ("checkpoint.pt", "checkpoint.rank1.pt"):
        a, b = checkpoint(full, name), checkpoint(part, name)
        a.pop("time_s"), b.pop("time_s")
        assert_same_state(a, b, name)
    assert len(os.listdir(os.path.dirname(full))) == 1 and out.count("iter 1/4 ") == 1
    config = json.load(open(os.path.join(full, "config.json")))
    assert config["world_size"] == 2 and config["global_batch_size"] == 2 * BATCH
    rank0, rank1 = checkpoint(full), checkpoint(full, "checkpoint.rank1.pt")
    for key in ("agent", "ewma", "optimizer", "aux_optimizer", "adv_moments"):
        assert_same_state(rank0[key], rank1[key], key)
    for key in ("mean", "var", "count"):  # reward statistics pooled over both workers' returns
        assert torch.equal(rank0["reward_normalizer"][key], rank1["reward_normalizer"][key]), key


def test_workers_whose_torchrun_launcher_is_killed_stop_and_save_rather_than_train_on_unseen(two_workers):
    """kill -9 of the torchrun launcher alone as rollout 2 begins: the workers see at the end of iteration 2 that
    their parent has gone (they hold until then, past 1's stop check), and stop together as on SIGTERM,
    under one reason whichever of them saw it, checkpoints saved at one iteration; the user's resume then goes on
    (while they lived, the folder's lock would have refused it)."""
    stopped, at_stop = two_workers["stopped"], two_workers["at_stop"]
    assert any(line.startswith("Stopped (no launcher), checkpoint of iteration") for line in stopped), stopped[-5:]
    done = checkpoint(at_stop)["iteration"]
    assert checkpoint(at_stop, "checkpoint.rank1.pt")["iteration"] == done == 2
    assert [int(r["iteration"]) for r in read_progress(two_workers["part"])] == [1, 2, 3, 4]


def torchrun_cmd(script, argv, workers=2):
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(workers),
            os.path.join(ROOT, "tests", "stand_in.py"), script, *argv]


def test_every_worker_stops_for_one_reason_whichever_worker_saw_it(monkeypatch):
    """stop_check's flags are summed over the workers: a worker that saw nothing itself stops with the others, and
    names the same reason (its own signal first, else no launcher, else another worker's signal), so that the order
    in which the workers looked does not decide the message. Two workers, the other's flags added by hand."""
    script = load("ppo_ewma")
    agent = script.Agent(script.NUM_ACTIONS)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(script, "LAUNCHER", os.getppid())  # alive, whichever process started pytest
    row = {"iteration": 7, "policy_loss": 0.5}

    def stop_with(other, own_signal=None):  # other: the other worker's (non-finite, signalled, no launcher)
        monkeypatch.setattr(script, "all_reduce_sum", lambda flags: flags + torch.tensor(other, dtype=flags.dtype))
        monkeypatch.setattr(script, "SIGNALLED", [own_signal] if own_signal else [])
        return script.stop_check(row, agent, "cpu")

    assert stop_with((0, 0, 0)) == (None, None)
    assert stop_with((0, 0, 1)) == (None, "no launcher")
    assert stop_with((0, 1, 1)) == (None, "no launcher")
    assert stop_with((0, 1, 0)) == (None, "SIGTERM")
    assert stop_with((0, 0, 1), own_signal="SIGINT") == (None, "SIGINT")
    assert stop_with((1, 0, 0)) == ("iteration 7: non-finite values on another worker", None)
    # a signal that lands after this worker's flags were summed (the other worker may have answered already) waits
    # for the next iteration's sum, as on every worker; stopping now would leave the other going on alone
    def signal_during_the_sum(flags):
        script.SIGNALLED.append("SIGINT")
        return flags
    monkeypatch.setattr(script, "all_reduce_sum", signal_during_the_sum)
    monkeypatch.setattr(script, "SIGNALLED", [])
    assert script.stop_check(row, agent, "cpu") == (None, None)
    assert stop_with((0, 0, 0), own_signal="SIGINT") == (None, "SIGINT")


def test_a_second_signal_stops_at_once_with_the_signals_exit_code_and_no_traceback(monkeypatch, capsys):
    """Ctrl-C once: the run says it stops after this iteration. Twice: it exits at once, as a stop by that signal
    (128 + its number: 130), not with a KeyboardInterrupt traceback."""
    script = load("ppo")
    monkeypatch.setattr(script, "SIGNALLED", [])
    script.on_signal(signal.SIGINT, None)
    assert script.SIGNALLED == ["SIGINT"] and "then stopping (again to stop at once)" in capsys.readouterr().out
    with pytest.raises(SystemExit) as stop:
        script.on_signal(signal.SIGINT, None)
    assert stop.value.code == 130


def test_a_resume_whose_workers_checkpoints_disagree_is_refused(two_workers):
    """Every worker saves its own checkpoint: with rank 1's put back from an earlier iteration, the ranks would train
    out of step; the resume is refused in one line instead, every worker exits with code 2 (at once: no C++ abort on
    the way out) unless torchrun stopped it first, and rank 0's rows stay as they were."""
    (code, err), mixed = two_workers["refused"], two_workers["mixed"]
    assert code != 0 and "checkpoints in" in err and "are of different iterations" in err
    codes = re.findall(r"exitcode *: (-?\d+) \(pid", err)  # torchrun's report, a line per worker
    assert len(codes) == 2 and "2" in codes and set(codes) <= {"2", "-15"}, err[-3000:]  # -15: the launcher
    assert "terminate called" not in err and "SIGABRT" not in err  # stopped the last after the first
    assert read_progress(mixed) == read_progress(two_workers["full"])


def test_a_checkpoint_one_worker_cannot_write_is_replaced_on_no_worker(two_workers):
    """Rank 1's checkpoint.rank1.pt.tmp is /dev/full (ENOSPC): its save fails while rank 0's is written whole; rank 0
    renames its own only once every worker has written theirs, so both stay the last iteration's, a set to resume
    from (renamed alone, rank 0's would be two iterations ahead of rank 1's: refused for good)."""
    code, err, folder = two_workers["disk_full"]
    assert code != 0 and "No space left on device" in err, err[-3000:]  # rank 1's, not rank 0's closed peer
    for name in ("checkpoint.pt", "checkpoint.rank1.pt"):
        assert checkpoint(folder, name)["iteration"] == 4, name
        assert open(os.path.join(folder, name), "rb").read() == open(os.path.join(two_workers["full"], name),
                                                                     "rb").read()


def test_non_finite_loss_stops_and_keeps_the_last_good_checkpoint(tmp_path, monkeypatch, capsys):
    """stop_check and save_checkpoint, the same in all four scripts (the appendix): one script stands for all."""
    script = load("ppo_ewma")
    real_update, calls = script.update, []

    def update_that_breaks_on_the_third_call(*args, **kwargs):
        row = real_update(*args, **kwargs)
        calls.append(1)
        if len(calls) == 3:
            row["policy_loss"] = float("nan")
        return row
    monkeypatch.setattr(script, "update", update_that_breaks_on_the_third_call)
    argv = tiny_argv(script.__name__, "--runs-dir", str(tmp_path), "--total-timesteps", str(5 * BATCH), "--save-model",
                     "--save-interval", "1")
    with pytest.raises(SystemExit) as exit_info:
        script.main(argv)
    message = str(exit_info.value.code)
    assert "iteration 3: non-finite policy_loss" in message and "checkpoint of iteration 2 in" in message
    run_dir = os.path.join(tmp_path, os.listdir(tmp_path)[0])
    assert checkpoint(run_dir)["iteration"] == 2
    assert not os.path.exists(os.path.join(run_dir, "checkpoint.pt.tmp"))


def test_non_finite_parameter_is_named(tmp_path, monkeypatch):
    ppo = load("ppo")
    real_update = ppo.update

    def update_that_poisons_a_weight(agent, *args, **kwargs):
        row = real_update(agent, *args, **kwargs)
        with torch.no_grad():
            agent.v_head.weight[0, 0] = float("inf")
        return row
    monkeypatch.setattr(ppo, "update", update_that_poisons_a_weight)
    with pytest.raises(SystemExit) as exit_info:
        ppo.main(tiny_argv("ppo", "--runs-dir", str(tmp_path), "--total-timesteps", str(2 * BATCH)))
    assert "iteration 1: non-finite parameter v_head.weight" in str(exit_info.value.code)
    assert "stopped, no checkpoint" in str(exit_info.value.code)


# --- Checkpoints across devices (Ready for the GPU) ------------------------------------------------------------------
def test_a_checkpoint_keeps_the_cpu_generator_and_the_run_devices_only(device, tmp_path):
    """No per-GPU list of every visible GPU's generator (a resume with fewer GPUs visible failed on it): the CPU's
    generator and, on a GPU, the run's own device's."""
    run_dir, _ = run_tiny("ppo", tmp_path, "--save-model", iterations=1, device=device)
    rng = checkpoint(run_dir)["rng"]
    assert set(rng) == {"torch", "cuda"} and rng["torch"].dtype == torch.uint8
    assert (rng["cuda"] is None) == (device.type == "cpu")


def test_a_resume_ignores_a_gpu_generator_it_cannot_use(finished_ppo, tmp_path):
    """A GPU-saved checkpoint resumed on the CPU: the GPU generator's state is left alone, nothing fails."""
    ppo, run_dir = load("ppo"), copy_run(finished_ppo, tmp_path)
    state = checkpoint(run_dir)
    state["rng"]["cuda"] = torch.randint(0, 256, (16,), dtype=torch.uint8)  # a GPU generator's state, as saved there
    torch.save(state, os.path.join(run_dir, "checkpoint.pt"))
    assert ppo.main(["--resume", run_dir, "--total-timesteps", str(3 * BATCH), "--no-cuda"]) == run_dir
    assert [r["iteration"] for r in read_progress(run_dir)] == ["1", "2", "3"]


@GPU
@pytest.mark.parametrize("saved_on,resumed_on", [("cpu", "cuda"), ("cuda", "cpu")])
def test_resume_across_devices(saved_on, resumed_on, tmp_path):
    """A CPU run resumed on a GPU and a GPU run on a CPU: both go on (the GPU generator starts from the seed)."""
    ppo = load("ppo_ewma")
    run_dir, _ = run_tiny("ppo_ewma", tmp_path, "--save-model", iterations=1, device=saved_on)
    assert ppo.main(["--resume", run_dir, "--total-timesteps", str(2 * BATCH), "--cuda" if resumed_on == "cuda" else
                     "--no-cuda"])
    rows = read_progress(run_dir)
    assert [r["iteration"] for r in rows] == ["1", "2"] and np.isfinite(float(rows[1]["policy_loss"]))


def test_after_resume_the_optimiser_state_is_laid_out_as_a_fresh_one(device, tmp_path, monkeypatch):
    """Adam's `step` counters on the CPU and its moments on the parameters' device, as in an optimiser that has
    just taken its first step: a `step` on the GPU would cost a host sync per parameter and step."""
    ppo = load("ppo")
    real_update, layouts = ppo.update, []

    def recording_update(agent, optimizer, *args, **kwargs):
        params = optimizer.param_groups[0]["params"]  # in order: the state's keys are the parameter objects
        layouts.append({(i, k): (v.device.type, v.dtype) for i, p in enumerate(params)
                        for k, v in optimizer.state.get(p, {}).items()})
        return real_update(agent, optimizer, *args, **kwargs)
    monkeypatch.setattr(ppo, "update", recording_update)
    run_dir, _ = run_tiny("ppo", tmp_path, "--save-model", iterations=2, device=device)
    ppo.main(["--resume", run_dir, "--total-timesteps", str(3 * BATCH)])
    fresh_after_one_step, resumed = layouts[1], layouts[2]
    assert resumed == fresh_after_one_step and len(resumed) == 3 * len(list(ppo.Agent(15).parameters()))
    assert {layout for (_, key), layout in resumed.items() if key == "step"} == {("cpu", torch.float32)}
    assert {layout for (_, key), layout in resumed.items() if key != "step"} == {(device.type, torch.float32)}
