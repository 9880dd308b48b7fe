"""experiments/: plotting, grouping and normalisation on synthetic run folders, the runners' commands,
resumable sweeps, and one real end-to-end sweep (fig2_batch_size.py --cpu, tiny: trains, commits, plans the resumes)."""
import argparse
import csv
import math
import os
import shutil
import sys

import numpy as np
import pytest

from conftest import ROOT, load
from synthetic_runs import analysis, figures, has, load_experiment, sweep, write_run


# --- Normalised return ---------------------------------------------------------------------------------
def test_normalized_return_matches_the_formula_by_hand():
    # hard: bigfish [0, 40], starpilot [1.5, 35], fruitbot [-0.5, 27.2]; easy: starpilot [2.5, 64]
    assert analysis.normalized_return(10.0, "bigfish", "hard") == pytest.approx(10 / 40)
    assert analysis.normalized_return(18.25, "starpilot", "hard") == pytest.approx((18.25 - 1.5) / 33.5)
    assert analysis.normalized_return(33.25, "starpilot", "easy") == pytest.approx((33.25 - 2.5) / 61.5)
    assert analysis.normalized_return(-0.5, "fruitbot", "hard") == pytest.approx(0.0)
    assert analysis.normalized_return(27.2, "fruitbot", "hard") == pytest.approx(1.0)
    np.testing.assert_allclose(analysis.normalized_return([0.5, 13.0], "bossfight", "hard"), [0.0, 1.0])
    assert math.isnan(analysis.normalized_return(5.0, "starpilot", "extreme"))
    for mode in ("easy", "hard"):
        assert set(analysis.PROCGEN_RANGES[mode]) == set(sweep.PROCGEN_GAMES)
        assert all(low < high for low, high in analysis.PROCGEN_RANGES[mode].values())


# --- Loading, smoothing, grouping ----------------------------------------------------------------------
def test_smooth_and_final_return_by_hand():
    np.testing.assert_allclose(analysis.smooth([1, np.nan, 3, 5], 2), [1, np.nan, 2, 4])
    np.testing.assert_allclose(analysis.smooth([1, 2, 3], 1), [1, 2, 3])
    # over env steps: the values whose step lies in (step - 250, step]; nan neither counts nor changes
    steps = [100, 200, 300, 400, 500]
    np.testing.assert_allclose(analysis.smooth_over_steps(steps, [1, 3, np.nan, 5, 9], 250),
                               [1, (1 + 3) / 2, np.nan, (3 + 5) / 2, (5 + 9) / 2])
    np.testing.assert_allclose(analysis.smooth_over_steps(steps, [1, 3, 4, 5, 9], 300), [1, 2, 8 / 3, 4, 6])
    np.testing.assert_allclose(analysis.smooth_over_steps(steps, [1, 3, 4], None), [1, 3, 4])
    rows = [{"episodic_return": float(v)} for v in range(1, 21)]  # 20 iterations: last 10% = iterations 19, 20
    assert analysis.final_return(rows) == pytest.approx((19 + 20) / 2)
    rows[-1]["episodic_return"] = float("nan")  # no episode ended in the last iteration
    assert analysis.final_return(rows) == pytest.approx(19)
    assert analysis.final_return(rows, frac=0.25) == pytest.approx((16 + 17 + 18 + 19) / 4)


def test_grouping_and_mean_over_seeds_by_hand(tmp_path):
    write_run(tmp_path, "starpilot", "a", 1, [1, 2, 3, 4])
    write_run(tmp_path, "starpilot", "a", 2, [3, 6, 5, 8])
    write_run(tmp_path, "starpilot", "b", 1, [0, 0, 0, 0])
    write_run(tmp_path, "bigfish", "a", 1, [9, 9, 9, 9])
    nested = tmp_path / "deeper"
    write_run(nested, "starpilot", "a", 3, [2, 3, 4, 6])
    runs = analysis.load_runs([str(tmp_path)])
    assert len(runs) == 5
    groups = analysis.group_runs(runs)
    assert set(groups) == {("a", "starpilot", "easy"), ("b", "starpilot", "easy"), ("a", "bigfish", "easy")}
    assert [r["config"]["seed"] for r in groups[("a", "starpilot", "easy")]] == [1, 2, 3]
    stats = analysis.mean_curve([analysis.curve(r) for r in groups[("a", "starpilot", "easy")]])
    np.testing.assert_allclose(stats["x"], [128, 256, 384, 512])
    np.testing.assert_allclose(stats["mean"], [(1 + 3 + 2) / 3, (2 + 6 + 3) / 3, (3 + 5 + 4) / 3, (4 + 8 + 6) / 3])
    np.testing.assert_allclose(stats["std"][0], np.std([1, 3, 2]))
    np.testing.assert_allclose(stats["min"], [1, 2, 3, 4])
    np.testing.assert_allclose(stats["max"], [3, 6, 5, 8])


def test_mean_curve_interpolates_runs_with_gaps(tmp_path):
    write_run(tmp_path, "starpilot", "a", 1, [1, None, 3, 5])
    write_run(tmp_path, "starpilot", "a", 2, [3, 4, None, 7])
    runs = analysis.group_runs(analysis.load_runs(str(tmp_path)))[("a", "starpilot", "easy")]
    stats = analysis.mean_curve([analysis.curve(r) for r in runs], points=4)
    np.testing.assert_allclose(stats["x"], [128, 256, 384, 512])
    # seed 1 at 256 interpolates (128, 1)-(384, 3) to 2; seed 2 at 384 interpolates (256, 4)-(512, 7) to 5.5
    np.testing.assert_allclose(stats["mean"], [(1 + 3) / 2, (2 + 4) / 2, (3 + 5.5) / 2, (5 + 7) / 2])


def test_curves_by_tag_smooth_every_value_over_the_same_env_steps(tmp_path):
    # Fig. 2 smooths every divisor C over the same env steps: 128 steps are 1 iteration of 128 (C=1) and 2 of 64
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    for c in (1, 2):
        write_run(tmp_path, "starpilot", f"div{c}", 1, [2.0, 4.0, 8.0, 16.0], batch=128 // c, mode="other")
    loaded = analysis.load_runs(str(tmp_path))
    for run in loaded:
        run["tags"] = {"divisor": int(run["config"]["exp_name"][3:])}
    fig, ax = plt.subplots()
    figures.plot_curves_by(ax, loaded, "divisor", [1, 2], str, False, smooth_steps=128)
    lines = {line.get_label(): (line.get_xdata(), line.get_ydata()) for line in ax.get_lines()}
    np.testing.assert_allclose(lines["1"][1], [2, 4, 8, 16])
    np.testing.assert_allclose(lines["2"][0], [64, 128, 192, 256])
    np.testing.assert_allclose(lines["2"][1], [2, 3, 6, 12])
    plt.close(fig)


def test_env_step_windows_by_hand(tmp_path):
    # iterations of 30,000 steps: (0, 100k] holds 30k 60k 90k; (200k, 300k] holds 210k 240k 270k and 300k itself
    extra = {"clipfrac": [0.1] * 9 + [0.3], "sps": [10, 20, 30, 40, 50, 60, 70, 80, 90, 5],
             "adv_std": [1, 2, 1.5, 0.5, 0.6, 1, 2, 4, 1, 3]}
    run = analysis.load_run(write_run(tmp_path, "starpilot", "a", 1, [1, 2, 3, 4, 5, 6, None, 8, 9, 10], batch=30_000,
                                      extra=extra))
    windows = analysis.step_windows(run["rows"], 100_000)
    assert [(low, high, [r["global_step"] for r in rows]) for low, high, rows in windows] == [
        (0, 100_000, [30_000, 60_000, 90_000]), (100_000, 200_000, [120_000, 150_000, 180_000]),
        (200_000, 300_000, [210_000, 240_000, 270_000, 300_000])]
    assert [analysis.column_mean(rows, "episodic_return") for _, _, rows in windows] == [2, 5, 9]  # (8 + 9 + 10) / 3
    short = analysis.load_run(write_run(tmp_path / "short", "starpilot", "b", 1, [None, None, 3], batch=50_000))
    assert analysis.window_table([run, short], ["a", "b"], 100_000).splitlines()[2:] == [
        "| (0, 100k] | 2.00 | - |", "| (100k, 200k] | 5.00 | 3.00 |", "| (200k, 300k] | 9.00 | - |"]
    # a per-episode log (CleanRL's) beside them: episodes ending at 50k and 100k, at 150k, at 250k and 300k; an
    # empty cell (a progress.csv given as one: an iteration without an episode) is no episode
    log = tmp_path / "episodes.csv"
    log.write_text("global_step,episodic_return\n50000,1.0\n70000,\n100000,2.0\n150000,4.0\n250000,6.0\n300000,7.0\n")
    assert analysis.episode_windows(log, 100_000) == [1.5, 4, 6.5]
    assert analysis.window_table([short], ["b"], 100_000, {"log": [1.5, 4]}).splitlines()[2:] == [
        "| (0, 100k] | - | 1.50 |", "| (100k, 200k] | 3.00 | 4.00 |"]  # a reference ends where the runs do
    d = analysis.run_diagnostics(run, frac=0.1, first_steps=100_000)
    # last 10% of 300k env steps: global_step in (270k, 300k], the last iteration alone
    assert (d["clipfrac"], d["clipfrac_last"]) == (pytest.approx((0.1 * 9 + 0.3) / 10), pytest.approx(0.3))
    assert (d["return_first"], d["return_last"]) == (2, 10)
    assert (d["global_step"], d["time_s"]) == (300_000, 20)  # 2 s per iteration
    assert d["sps_mean"] == 15_000 and d["sps_median"] == 45
    assert math.isnan(d["approx_kl"])  # no such column
    assert math.isnan(d["return_last_sem"])  # one iteration: no standard error
    # adv_std per window: (1, 2, 1.5) swings 2x, (0.5, 0.6, 1) 2x, (2, 4, 1, 3) 4x
    assert d["adv_std_swing"] == 4
    # last 30%: (210k, 300k] holds 240k 270k 300k, returns 8 9 10: mean 9, sample std 1, standard error 1 / sqrt(3)
    d = analysis.run_diagnostics(run, frac=0.3)
    assert (d["return_last"], d["return_last_sem"]) == (9, pytest.approx(1 / math.sqrt(3)))
    # the last 10% of the 250k env steps asked for (a run's last iteration may end past them): (225k, 250k], the
    # iteration at 240k alone, not the run's own last tenth
    d = analysis.run_diagnostics(run, frac=0.1, end=250_000)
    assert (d["return_last"], d["clipfrac_last"], d["global_step"]) == (8, pytest.approx(0.1), 300_000)


def test_dedupe_keeps_the_run_that_got_furthest(tmp_path):
    write_run(tmp_path / "x", "starpilot", "a", 1, [1, 2])
    write_run(tmp_path / "y", "starpilot", "a", 1, [1, 2, 3, 4])
    groups = analysis.group_runs(analysis.load_runs(str(tmp_path)))
    assert len(groups[("a", "starpilot", "easy")]) == 1 and len(groups[("a", "starpilot", "easy")][0]["rows"]) == 4


def test_final_returns_averaged_over_envs_then_seeds_by_hand(tmp_path):
    finals = {("starpilot", 1): 12.0, ("starpilot", 2): 20.0, ("bigfish", 1): 8.0, ("bigfish", 2): 24.0}
    for (env, seed), value in finals.items():
        write_run(tmp_path, env, "fig", seed, [0.0] * 9 + [value], mode="hard")
    runs = analysis.load_runs(str(tmp_path))
    for run in runs:
        run["tags"] = {"variant": "v"}
    rows = analysis.summary_rows(runs, ("variant",))
    assert analysis.metric_name(rows) == "normalized"
    per_seed = [np.mean([(finals[("starpilot", s)] - 1.5) / 33.5, finals[("bigfish", s)] / 40]) for s in (1, 2)]
    stats = analysis.aggregate_final(rows, ("variant",))[("v",)]
    assert stats["mean"] == pytest.approx(np.mean(per_seed))
    assert stats["std"] == pytest.approx(np.std(per_seed))
    assert stats["sem"] == pytest.approx(np.std(per_seed, ddof=1) / math.sqrt(2))
    assert stats["n"] == 2


# --- plot.py --------------------------------------------------------------------------------------------
def test_plot_draws_png_with_seed_groups_and_eval_curve(tmp_path, capsys, monkeypatch):
    plot = load_experiment("plot")
    runs_dir = tmp_path / "runs"
    a1 = write_run(runs_dir, "starpilot", "ppo", 1, [1, 2, None, 4, 5])
    a2 = write_run(runs_dir, "starpilot", "ppo", 2, [2, 3, 3, None, 6], seconds_per_iteration=3.0)
    write_run(runs_dir, "starpilot", "ppo_ewma", 1, [1, 3, 4, 6, 7],
              extra={"eval_return": [None, 1.0, None, 2.0, 2.5]})
    out = str(tmp_path / "out" / "curves.png")
    assert plot.main([str(runs_dir), "-o", out, "--normalize", "--smooth", "2"]) == out
    image = __import__("matplotlib.image").image.imread(out)
    assert image.ndim == 3 and image.shape[0] > 200 and image.shape[1] > 400
    assert image[..., :3].std() > 0  # not a blank canvas
    labels = plot.plot_runs(analysis.load_runs([a1, a2, str(runs_dir)]), str(tmp_path / "b.png"), spread="minmax")
    assert labels == ["ppo, 2 seeds", "ppo_ewma, 1 seed", "ppo_ewma, 1 seed: eval"]
    assert os.path.getsize(tmp_path / "b.png") > 0
    # the title names the shading only where a curve has seeds to shade between
    titles = []
    monkeypatch.setattr(plot.figures, "save_figure", lambda fig, out: titles.append(fig.get_suptitle()))
    plot.plot_runs(analysis.load_runs([a1, a2]), "unused.png", spread="minmax")
    plot.plot_runs(analysis.load_runs([a1]), "unused.png")
    assert titles == ["starpilot (easy): mean over seeds, shaded: min-max", "starpilot (easy): one seed per curve"]
    with pytest.raises(SystemExit) as exit_info:
        plot.main([str(tmp_path / "out"), "-o", str(tmp_path / "c.png")])
    assert exit_info.value.code == 2 and "no run folders" in capsys.readouterr().err


def test_plot_names_the_run_it_leaves_out_keeps_modes_apart_and_refuses_a_run_without_episodes(tmp_path, capsys,
                                                                                              monkeypatch):
    plot = load_experiment("plot")
    short = write_run(tmp_path / "a", "starpilot", "ppo", 1, [1, 2])  # a first short run, then the same seed longer
    write_run(tmp_path / "b", "starpilot", "ppo", 1, [1, 2, 3, 4])
    hard = write_run(tmp_path / "c", "starpilot", "ppo", 1, [0, 1, 1, 2], mode="hard")
    assert plot.main([str(tmp_path / "a"), str(tmp_path / "b"), "-o", str(tmp_path / "ab.png")])
    out, err = capsys.readouterr()
    assert out.startswith("1 run -> ")
    assert err == (f"plot.py: left out {short}: one run per seed in a curve, the furthest (then the newest); runs of "
                   "other settings need an --exp-name of their own\n")
    labels = plot.plot_runs(analysis.load_runs([str(tmp_path / "b"), hard]), str(tmp_path / "bc.png"))
    assert labels == ["ppo (starpilot, easy), 1 seed", "ppo (starpilot, hard), 1 seed"]  # one seed of each, not 2
    empty = write_run(tmp_path / "d", "starpilot", "ppo", 1, [None, None])
    with pytest.raises(SystemExit) as exit_info:
        plot.main([empty, "-o", str(tmp_path / "d.png")])
    assert exit_info.value.code == 2 and "no episode has ended yet in" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "d.png")
    empty = write_run(tmp_path / "e", "starpilot", "ppo", 2, [None, None])  # beside a run with episodes: named
    plot.main([str(tmp_path / "b"), empty, "-o", str(tmp_path / "be.png")])
    assert capsys.readouterr().err == f"plot.py: left out {empty}: no episode has ended yet\n"
    # a run of analysis.RESUMED is drawn without the first iteration after its resume, as in every figure
    drawn = []
    monkeypatch.setitem(analysis.RESUMED, os.path.basename(short), (2,))
    monkeypatch.setattr(plot, "plot_runs", lambda runs, *rest: drawn.extend(runs))
    plot.main([short, "-o", str(tmp_path / "a.png")])
    assert [row["iteration"] for row in drawn[0]["rows"]] == [1]


# --- bench_speed.py ---------------------------------------------------------------------------------------
def test_bench_speed_refuses_a_count_below_1_in_one_line(monkeypatch, capsys):
    """--repeats 0 or --iterations 0 would time nothing and fail on the empty medians (an IndexError)."""
    bench_speed = load_experiment("bench_speed")
    for flag in ("--repeats", "--iterations"):
        monkeypatch.setattr(sys, "argv", ["bench_speed.py", flag, "0"])
        with pytest.raises(SystemExit) as exit_info:
            bench_speed.main()
        assert exit_info.value.code == 2 and capsys.readouterr().err.splitlines()[-1] == (
            f"bench_speed.py: error: argument {flag}: must be at least 1, got 0")


# --- adam_state.py --------------------------------------------------------------------------------------
def test_adam_state_reads_each_parts_gradient_rms_and_the_step_eps_leaves_by_hand(tmp_path, capsys):
    """ppg.py's real Agent and Adam, two steps of constant gradients g per part: Adam's bias-corrected v_hat is then
    g^2 exactly, so sqrt(v_hat) = g and the step kept is g / (g + eps); the aux head, which got no gradient, has no
    state and no row."""
    import torch
    adam_state, agent = load_experiment("adam_state"), load("ppg").Agent(15)
    optimizer = torch.optim.Adam(agent.parameters(), lr=5e-4, eps=1e-5)
    grads = {"policy.trunk": 1e-6, "policy.pi_head": 1e-3, "value.0": 4e-5, "value.1": 2e-5}
    for _ in range(2):
        for name, p in agent.named_parameters():
            part = adam_state.part_of(name)
            p.grad = torch.full_like(p, grads[part]) if part in grads else None
        optimizer.step()
    run_dir = tmp_path / "starpilot__ppg__1__1"
    run_dir.mkdir()
    torch.save({"agent": agent.state_dict(), "optimizer": optimizer.state_dict()}, run_dir / sweep.CHECKPOINT)
    adam_state.main([str(run_dir)])
    out = capsys.readouterr().out
    assert "starpilot__ppg__1__1, optimizer (eps 1e-05, 2 steps)" in out
    rows = [line for line in out.splitlines() if line.startswith("| ") and not line.startswith("| part")]
    assert rows == ["| policy.trunk | 622,144 | 1.0e-06 | 1.00 | 0.09 | 0.99 |",  # 1e-6 / (1e-6 + 1e-5) = 0.09
                    "| policy.pi_head | 3,855 | 1.0e-03 | 0.00 | 0.99 | 1.00 |",
                    "| value.0 | 622,144 | 4.0e-05 | 0.00 | 0.80 | 1.00 |",  # 4e-5 / 5e-5
                    "| value.1 | 257 | 2.0e-05 | 0.00 | 0.67 | 1.00 |"]  # 2e-5 / 3e-5
    with pytest.raises(SystemExit) as exit_info:  # a committed run keeps no checkpoint
        adam_state.main([str(run_dir), str(tmp_path)])
    assert exit_info.value.code == 2 and f"no {sweep.CHECKPOINT} in {tmp_path}" in capsys.readouterr().err


# --- Runners: the commands they build ------------------------------------------------------------------
def test_staleness_runner_commands():
    staleness = load_experiment("fig1_staleness")
    args = staleness.parse_args(["--staleness-values", "0", "2", "--seeds", "1", "--envs", "starpilot"])
    runs = staleness.build_runs(args)
    by_tag = {(r.tags["variant"], r.tags["staleness"]): sweep.command(r, "/tmp/r") for r in runs}
    recent, decoupled, behav = by_tag[("recent", 2)], by_tag[("decoupled", 2)], by_tag[("behav", 2)]
    assert recent[1].endswith(os.sep + "ppo.py") and has(recent, "--staleness", "2")
    assert has(recent, "--old-policy", "recent")
    assert decoupled[1].endswith("ppo_ewma.py") and has(decoupled, "--staleness", "2")
    assert has(decoupled, "--prox", "recent") and "--old-policy" not in decoupled
    assert behav[1].endswith(os.sep + "ppo.py") and has(behav, "--old-policy", "behav")
    assert has(recent, "--distribution-mode", "hard") and has(recent, "--num-envs", "256")  # the paper's settings
    assert has(recent, "--total-timesteps", "100000000") and has(recent, "--runs-dir", "/tmp/r")
    names = {r.exp_name for r in runs}
    assert "fig1__ppo__old-recent__stale2" in names and "fig1__ppo_ewma__prox-recent__stale2" in names
    # staleness 0: the recent and behav objectives coincide, one shared ppo.py run
    assert by_tag[("recent", 0)] == by_tag[("behav", 0)] and len(sweep.unique_runs(runs)) == 5
    paper = staleness.parse_args([])
    assert len(paper.envs) == 16 and paper.seeds == [1, 2, 3, 4]
    assert paper.runs_dir == os.path.join(ROOT, "runs", "fig1")
    assert len(sweep.unique_runs(staleness.build_runs(paper))) == 16 * 4 * (1 + 5 + 5 + 6)
    quick = staleness.parse_args(["--quick"])
    assert quick.runs_dir == os.path.join(ROOT, "runs", "fig1_quick")
    assert quick.distribution_mode == "easy" and quick.parallel == 2


def test_batch_size_runner_commands():
    batch_size = load_experiment("fig2_batch_size")
    args = batch_size.parse_args(["--divisors", "1", "4", "--seeds", "1", "--envs", "starpilot", "--num-envs", "64",
                                  "--variants", "all", "no-lr", "no-ewma"])
    cmds = {(r.tags["variant"], r.tags["divisor"]): sweep.command(r, "/tmp/r") for r in batch_size.build_runs(args)}
    ablation = cmds[("no-lr", 4)]
    assert ablation[1].endswith("ppg_ewma.py") and " --batch-divisor 4 --no-adjust lr" in " ".join(ablation)
    assert has(cmds[("all", 4)], "--batch-divisor", "4") and "--no-adjust" not in cmds[("all", 4)]
    assert cmds[("no-lr", 1)] == cmds[("all", 1)]  # nothing to adjust at C = 1: the ablation is the full run
    assert cmds[("no-ewma", 4)][1].endswith(os.sep + "ppg.py") and has(cmds[("no-ewma", 4)], "--batch-divisor", "4")
    for cmd in cmds.values():  # the paper's figures: the official code's choices, whatever the defaults
        assert has(cmd, "--minibatch-by", "env") and has(cmd, "--init", "normed") and "--no-clip-vloss" in cmd
    assert not any("--update-epochs" in c or "--save-model" in c for c in cmds.values())  # PPG: 1 policy epoch anyway
    ppo = batch_size.build_runs(batch_size.parse_args(["--script", "ppo_ewma", "--variants", "all", "no-ewma"]))
    assert {r.script for r in ppo} == {"ppo_ewma", "ppo"} and all(r.options["update_epochs"] == 1 for r in ppo)
    with pytest.raises(SystemExit):
        batch_size.parse_args(["--divisors", "3", "--num-envs", "64"])
    with pytest.raises(SystemExit):
        batch_size.parse_args(["--cpu", "--quick"])


@pytest.mark.parametrize("runner, argv, message", [
    ("fig4_ewma_vs_baseline", ["--cpu", "--final-frac", "2"], "--final-frac: must be above 0 and at most 1, got 2"),
    ("fig4_ewma_vs_baseline", ["--quick", "--parallel", "0"], "--parallel: must be at least 1, got 0"),
    ("fig1_staleness", ["--cpu", "--staleness-values", "-1"], "--staleness-values: must be at least 0, got -1"),
    ("fig2_batch_size", ["--divisors", "x"], "--divisors: invalid int value: 'x'"),
    ("fig2_batch_size", ["--quick", "--ablation-divisors", "5"],
     "--ablation-divisors: each must divide --num-envs (16), got [5]"),
    ("plot", ["data", "--smooth", "0"], "--smooth: must be at least 1, got 0"),
    ("learning_curve", ["--window", "0"], "--window: must be at least 1, got 0"),
    ("plot", ["data", "-o", "curves.txt"], "-o/--out: must end in .png, .pdf, .svg or another image format, got "
                                           "curves.txt"),
    ("learning_curve", ["-o", "curves"], "-o/--out: must end in .png, .pdf, .svg or another image format, got curves")])
def test_a_runners_bad_argument_is_refused_in_argparses_one_line(runner, argv, message, capsys):
    """A final fraction of 2 printed a table of (-1000k, 1M] and another verdict; a negative staleness planned runs
    that each script then refused; plot.py's -o curves.txt failed in matplotlib after the curves were drawn: now
    argparse's line and exit code 2, before anything is planned or written."""
    module = load_experiment(runner)
    with pytest.raises(SystemExit) as exit_info:
        getattr(module, "parse_args", module.main)(argv)  # learning_curve.py parses in main
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.splitlines()[-1].endswith(f"error: argument {message}")


def test_a_presets_runs_go_to_the_repository_from_any_folder(monkeypatch, tmp_path):
    """From another folder the same command must find the runs already made (and resume the one stopped)."""
    monkeypatch.chdir(tmp_path)
    args = load_experiment("fig4_ewma_vs_baseline").parse_args(["--cpu"])
    assert args.runs_dir == os.path.join(ROOT, "runs", "fig4_cpu")


def test_plot_only_with_no_runs_says_how_to_train_them_and_writes_nothing(tmp_path, capsys):
    load_experiment("fig1_staleness").main(["--quick", "--plot-only", "--runs-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert f"no finished runs in {tmp_path}: no summary, no figure (the same command without --plot-only" in out
    assert os.listdir(tmp_path) == []


def test_flags_a_script_would_refuse_stop_the_sweep_before_any_run_starts(tmp_path, capsys):
    """Each script checked its flags only when its run started: --num-minibatches 7 failed every run in turn, and
    in a sweep whose runs differ (fig2's divisors) a later run could fail hours in. Now: one line, exit 2, nothing
    written."""
    runs_dir = tmp_path / "runs"
    with pytest.raises(SystemExit) as exit_info:
        load_experiment("fig2_batch_size").main(["--tiny", "--num-minibatches", "3", "--runs-dir", str(runs_dir)])
    err = capsys.readouterr().err.splitlines()
    assert exit_info.value.code == 2 and not runs_dir.exists()
    assert len(err) == 1 and err[0].endswith(": error: ppg_ewma.py refuses starpilot fig2__ppg_ewma__div1 seed 1: "
                                             "argument --num-minibatches: must divide the 128 steps, got 3")


def test_ewma_runner_commands():
    ewma = load_experiment("fig4_ewma_vs_baseline")
    args = ewma.parse_args(["--quick", "--runs-dir", "/tmp/x"])
    cmds = {r.script: sweep.command(r, args.runs_dir) for r in ewma.build_runs(args)}
    assert sorted(cmds) == sorted(sweep.SCRIPTS)
    assert all(has(c, "--num-envs", "16") and has(c, "--distribution-mode", "easy") for c in cmds.values())
    assert has(cmds["ppg"], "--n-pi", "8") and "--n-pi" not in cmds["ppo"]
    assert has(cmds["ppg_ewma"], "--exp-name", "fig4__ppg_ewma")


# --- Fig. 2 at CPU scale: the --cpu preset ---------------------------------------------------------------
CPU_RUNS = {(1, ()), (4, ()), (16, ()), (16, ("lr",)), (16, ("prox",)), (16, ("adv",))}  # (C, --no-adjust)


def test_cpu_preset_plans_six_ppo_ewma_runs_at_the_scripts_defaults_and_the_official_codes_choices(tmp_path, capsys,
                                                                                                   monkeypatch):
    batch_size, ppo_ewma = load_experiment("fig2_batch_size"), load("ppo_ewma")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)  # 2 cores, whatever runs this
    args = batch_size.parse_args(["--cpu"])
    assert args.runs_dir == os.path.join(ROOT, "runs", "fig2_cpu")
    assert (args.parallel, args.save_model, args.smooth_steps) == (2, True, 100_000)
    assert (args.committed, args.out_dir, args.summary_dir) == (os.path.join(ROOT, "data", "runs"),
                                                                os.path.join(ROOT, "docs", "figures"),
                                                                os.path.join(ROOT, "data"))
    runs = sweep.unique_runs(batch_size.build_runs(args))
    assert len(runs) == 6
    assert {(r.options["batch_divisor"], tuple(r.options.get("no_adjust", []))) for r in runs} == CPU_RUNS
    defaults = vars(ppo_ewma.parse_args([]))
    for run in runs:
        cmd = sweep.command(run, str(tmp_path))
        assert cmd[1] == os.path.join(ROOT, "ppo_ewma.py") and "--save-model" in cmd
        issue = (("--env-id", "starpilot"), ("--seed", "1"), ("--total-timesteps", "1000000"), ("--update-epochs", "1"))
        assert all(has(cmd, flag, value) for flag, value in issue)
        # today's ppo_ewma.py accepts it and runs at its defaults but for the issue's flags, Section 4's adjustments
        # and the official code's choices where CleanRL's differ (with which the paper's figures were made)
        parsed = vars(ppo_ewma.parse_args(cmd[2:]))
        c, dropped = run.options["batch_divisor"], run.options.get("no_adjust", [])
        changed = {k for k in defaults if parsed[k] != defaults[k]} - set(sweep.OFFICIAL_CODE)
        assert all(parsed[k] == v for k, v in sweep.OFFICIAL_CODE.items())
        assert changed <= {"exp_name", "total_timesteps", "update_epochs", "save_model", "runs_dir", "batch_divisor",
                           "num_envs", "no_adjust", "learning_rate", "beta_prox", "adv_ewma_decay"}, changed
        assert parsed["num_envs"] == 64 // c and (parsed["num_steps"], parsed["num_minibatches"]) == (256, 8)
        assert parsed["learning_rate"] == pytest.approx(5e-4 / (1 if "lr" in dropped else math.sqrt(c)))
        assert ("beta_prox" in changed) == (c > 1 and "prox" not in dropped)
        assert ("adv_ewma_decay" in changed) == (c > 1 and "adv" not in dropped)
    assert batch_size.main(["--cpu", "--dry-run", "--runs-dir", str(tmp_path / "runs"),
                            "--committed", str(tmp_path / "committed")]) is None
    out = capsys.readouterr().out
    assert "6 runs planned, 6 still to train" in out and out.count("ppo_ewma.py --env-id starpilot --seed 1") == 6
    assert "estimate" in out and "h at 2 in parallel" in out
    # one run left runs alone: its estimate is one run's, not halved
    assert batch_size.main(["--cpu", "--dry-run", "--divisors", "1", "--variants", "all", "--runs-dir",
                            str(tmp_path / "runs"), "--committed", str(tmp_path / "committed")]) is None
    out = capsys.readouterr().out
    assert "1 runs planned, 1 still to train" in out and " at 1 in parallel" in out
    # the figure shows the seeds of its own committed runs, not those of the other figures' runs beside them
    write_run(tmp_path / "committed", "starpilot", "fig2__ppo_ewma__div1", 2, [1.0])
    write_run(tmp_path / "committed", "starpilot", "ablation__ppo__init", 5, [1.0])
    args = batch_size.parse_args(["--cpu", "--committed", str(tmp_path / "committed")])
    assert {run.seed for run in batch_size.shown_runs(args)} == {1, 2}
    # a second seed of C = 1 and C = 16 only
    second = batch_size.build_runs(batch_size.parse_args(["--cpu", "--seeds", "2", "--divisors", "1", "16",
                                                          "--variants", "all"]))
    assert [(r.seed, r.options["batch_divisor"], r.options.get("no_adjust")) for r in second] == [(2, 1, None),
                                                                                                 (2, 16, None)]


def recorded_config(run):
    """What config.json records of `run`'s options (the envs after division by C), as sweep.config_matches reads it."""
    return {**run.options, "num_envs": run.options["num_envs"] // run.options.get("batch_divisor", 1),
            "no_adjust": run.options.get("no_adjust", []), "total_timesteps": run.total_timesteps}


def test_cpu_sweep_skips_committed_runs_and_commits_finished_ones(tmp_path, capsys):
    batch_size = load_experiment("fig2_batch_size")
    runs_dir, committed = tmp_path / "runs", tmp_path / "committed"
    argv = ["--cpu", "--total-timesteps", "512", "--runs-dir", str(runs_dir), "--committed", str(committed)]
    runs = {r.exp_name: r for r in batch_size.build_runs(batch_size.parse_args(argv))}
    at_1, at_4 = runs["fig2__ppo_ewma__div1"], runs["fig2__ppo_ewma__div4"]
    write_run(committed, "starpilot", at_1.exp_name, 1, [1.0, 2.0], batch=256, config=recorded_config(at_1))
    done = write_run(runs_dir, "starpilot", at_4.exp_name, 1, [1.0, 2.0], batch=256, config=recorded_config(at_4))
    for name in (sweep.CHECKPOINT, "videos"):  # never committed
        open(os.path.join(done, name), "w").close()
    log = []
    assert sweep.run_all([at_1, at_4], str(runs_dir), committed=str(committed), log=log.append) == []
    copy = os.path.join(str(committed), os.path.basename(done))
    assert sorted(log) == sorted(["skip (committed): starpilot fig2__ppo_ewma__div1 seed 1",
                                  "skip (finished): starpilot fig2__ppo_ewma__div4 seed 1", f"committed to {copy}"])
    assert sorted(os.listdir(copy)) == ["config.json", "progress.csv"]
    for name in ("config.json", "progress.csv"):
        assert open(os.path.join(copy, name)).read() == open(os.path.join(done, name)).read()
    assert batch_size.main(argv + ["--dry-run"]) is None  # the other four are still to train
    out = capsys.readouterr().out
    assert "6 runs planned, 4 still to train" in out and "__div1 " not in out and "__div4 " not in out


def test_sweep_resumes_an_unfinished_run_from_its_checkpoint(tmp_path):
    run = sweep.Job("ppo_ewma", "starpilot", 1, "fig2__ppo_ewma__div16", 512,
                    {"num_envs": 64, "batch_divisor": 16, "update_epochs": 1, "save_model": True})
    fresh = sweep.command(run, str(tmp_path))
    assert sweep.launch_command(run, str(tmp_path)) == fresh
    folder = write_run(tmp_path, "starpilot", run.exp_name, 1, [1.0], batch=256, config=recorded_config(run))
    assert sweep.launch_command(run, str(tmp_path)) == fresh  # stopped before its first checkpoint: start again
    open(os.path.join(folder, sweep.CHECKPOINT), "w").close()
    assert sweep.launch_command(run, str(tmp_path)) == [sys.executable, os.path.join(ROOT, "ppo_ewma.py"), "--resume",
                                                        os.path.abspath(folder), "--total-timesteps", "512"]
    other = sweep.Job(**{**run.__dict__, "options": {**run.options, "batch_divisor": 4}})
    assert sweep.find_resumable(other, str(tmp_path)) is None  # same name, another configuration
    shorter = sweep.Job(**{**run.__dict__, "total_timesteps": 128})
    assert sweep.find_resumable(shorter, str(tmp_path)) is None  # a script never shortens a run
    with open(os.path.join(folder, "progress.csv"), "a") as f:
        f.write("2,512,4.0,64.0,2.0,50\n")
    assert sweep.find_resumable(run, str(tmp_path)) is None and sweep.is_finished(run, str(tmp_path))


# --- The CleanRL ablation (issue 36) ---------------------------------------------------------------------
def test_cleanrl_ablation_runs_pass_every_group_and_its_table_drops_a_resumed_iteration(tmp_path, monkeypatch):
    ablation = load_experiment("cleanrl_ablation")
    flags = [k for group in ablation.GROUPS.values() for k in group]
    assert sorted(flags) == sorted(sweep.OFFICIAL_CODE) == sorted(sweep.CLEANRL)  # each flag in one group
    for run in ablation.plan(sorted(ablation.STAGES)):  # every flag of every group, whatever the defaults become
        assert set(flags) <= set(run.options) and run.total_timesteps == 1_000_000
        switched = {k for group in run.tags["groups"].split("+") for k in ablation.GROUPS.get(group, ())}
        assert all(run.options[k] == (sweep.CLEANRL if k in switched else sweep.OFFICIAL_CODE)[k] for k in flags)
    # iterations of 30,000 steps to 120,000; the 150k one overshoots, the 2nd is the first after a resume
    run_dir = write_run(tmp_path, "starpilot", "x", 1, [1, 9, 3, 4, 100], batch=30_000,
                        config={"total_timesteps": 120_000})
    run = {**analysis.load_run(run_dir), "tags": {"groups": "mb+gc"}}
    control = tmp_path / "cleanrl"
    control.mkdir()
    (control / "seed1_episodes.csv").write_text("global_step,episodic_return\n90000,5.0\n110000,7.0\n")
    (control / "seed1_iterations.csv").write_text("global_step,clipfrac\n16384,0.0\n")  # not a column
    monkeypatch.setattr(analysis, "RESUMED", {os.path.basename(run_dir): (2,)})
    monkeypatch.setattr(sweep, "CLEANRL_RUNS", str(control))
    monkeypatch.setattr(analysis, "CLEANRL_STARPILOT_1M", {"GPU": [0.5, 1.5, 2.5]})
    lines = ablation.tables([run], width=100_000).splitlines()
    assert lines[2:6] == ["| env steps | mb+gc seed 1 | GPU | CleanRL seed 1 (this CPU) |", "|---|---|---|---|",
                          "| (0, 100k] | 2.00 | 0.50 | 5.00 |", "| (100k, 200k] | 4.00 | 1.50 | 7.00 |"]
    assert "| mb+gc seed 1 | --minibatch-by step --max-grad-norm 0.5 --adam-eps 1e-05 |" in lines[-1]


def test_cleanrl_ablation_dry_run_says_what_is_left(tmp_path, monkeypatch, capsys):
    ablation = load_experiment("cleanrl_ablation")
    monkeypatch.setattr(sweep, "COMMITTED", str(tmp_path / "committed"))  # nothing committed
    todo = ablation.main(["--stage", "5", "--dry-run", "--runs-dir", str(tmp_path / "runs")])
    out = capsys.readouterr().out.splitlines()
    assert len(todo) == 3 and out[0].startswith("3 runs planned, 3 still to train") and len(out) == 4
    assert "--seed 5" in out[3] and "--minibatch-by step" in out[3] and "--max-grad-norm 0.0" in out[3]


# --- Resumable sweeps ----------------------------------------------------------------------------------
def test_finished_runs_are_recognised_and_skipped(tmp_path):
    run = sweep.Job("ppo", "starpilot", 1, "fig1__ppo__stale0", 512,
                    {"distribution_mode": "easy", "num_envs": 4, "num_steps": 32, "staleness": 0, "cuda": False})
    assert not sweep.is_finished(run, str(tmp_path))
    short = write_run(tmp_path, "starpilot", run.exp_name, 1, [1, 2, 3], config={"staleness": 0})
    assert not sweep.is_finished(run, str(tmp_path))  # 384 of 512 steps: interrupted
    done = write_run(tmp_path / "other", "starpilot", run.exp_name, 1, [1, 2, 3, 4], config={"staleness": 0})
    os.rename(done, os.path.join(str(tmp_path), os.path.basename(done) + "0"))
    assert sweep.find_finished(run, str(tmp_path)).endswith("0") and os.path.isdir(short)
    hard = sweep.Job(**{**run.__dict__, "options": {**run.options, "distribution_mode": "hard"}})
    assert not sweep.is_finished(hard, str(tmp_path))  # same name, different configuration
    log = []
    assert sweep.run_all([run, run], str(tmp_path), parallel=2, log=log.append) == []
    assert log == [f"skip (finished): starpilot {run.exp_name} seed 1"]


def test_the_newest_run_is_the_last_started_by_its_folder_name_not_its_mtime(tmp_path):
    """A fresh clone's folders have the checkout's mtimes, in any order: which of two finished runs of one
    configuration is the newest (a sweep's pick, plot.py's curve) comes from the time that ends a folder's name."""
    run = sweep.Job("ppo", "starpilot", 1, "ppo", 256, {"num_envs": 4, "num_steps": 32})
    early, late = (os.path.join(str(tmp_path), f"starpilot__ppo__1__{t}") for t in (1795000000, 1796000000))
    for parent, folder in (("a", early), ("b", late)):
        os.rename(write_run(tmp_path / parent, "starpilot", "ppo", 1, [1, 2], config={"staleness": 0}), folder)
    os.utime(late, (1, 1))  # checked out first
    assert sweep.find_finished(run, str(tmp_path)) == late
    assert [r["dir"] for r in sweep.select_runs([run], str(tmp_path), earliest=True)] == [early]
    assert [r["dir"] for r in analysis.dedupe(analysis.load_runs([early, late]))] == [late]


def test_a_ppg_run_is_finished_at_the_end_of_its_last_phase_only(tmp_path):
    """PPG rounds a run up to whole phases: asked for 1,000 steps with phases of 2 x 128, it ends at 1,024; at
    1,024 - 128 it has passed 1,000 but not had its last aux phase, so it resumes rather than counting as done."""
    run = sweep.Job("ppg", "starpilot", 1, "ppg", 1000, {"num_envs": 4, "num_steps": 32})
    config = {"staleness": 0, "n_pi": 2, "global_batch_size": 128, "total_timesteps": 1000}
    cut = write_run(tmp_path, "starpilot", "ppg", 1, [1] * 7, config=config)
    open(os.path.join(cut, sweep.CHECKPOINT), "w").close()
    assert sweep.planned_steps(run, config) == 1024 and not sweep.is_finished(run, str(tmp_path))
    assert sweep.find_resumable(run, str(tmp_path)) == cut
    write_run(tmp_path / "whole", "starpilot", "ppg", 1, [1] * 8, config=config)
    assert sweep.is_finished(run, str(tmp_path / "whole"))


def test_core_slots_split_the_cores():
    cores = sorted(os.sched_getaffinity(0))
    assert sweep.core_slots(1) == [cores]
    slots = sweep.core_slots(2, cores_per_run=1)
    assert all(len(s) == 1 for s in slots) and (len(cores) < 2 or slots[0] != slots[1])


# --- The staleness runner's tables and commands; the fig2 sweep end to end ------------------------------
def test_staleness_tables_lag_matched_and_diagnostics_by_hand():
    """Fresh PPO after as many updates: the K = 0 runs' last tenth moved K iterations earlier, averaged over seeds (the
    value-clip control's own K = 0 run apart); the diagnostics: each run's mean entropy, approx_kl and clipfrac over its
    last tenth."""
    staleness = load_experiment("fig1_staleness")
    args = argparse.Namespace(num_envs=2, num_steps=5, final_frac=0.2, total_timesteps=100)  # 10 env steps a batch

    def run(name, k, offset, variant="recent"):
        rows = [{"iteration": i + 1, "global_step": 10.0 * (i + 1), "episodic_return": i + offset,
                 "entropy": 2.0 - i / 10, "approx_kl": i / 1000, "clipfrac": i / 100} for i in range(10)]
        tags = {"staleness": k, "variant": variant}
        return {"dir": f"/runs/{name}", "tags": tags, "config": {"seed": 1}, "rows": rows}
    runs = [run("fresh1", 0, 0.0), run("fresh2", 0, 1.0), run("stale", 2, 50.0), run("control", 0, 90.0, "noclip")]
    # (80, 100]: iterations 9 and 10, returns 8 and 9 (seed 2: 9 and 10); K = 2: (60, 80]; K = 3: (50, 70]
    assert staleness.lag_matched(runs, [0, 2, 3], args) == ["fresh PPO after as many updates", "9.00", "7.00", "6.00"]
    table = staleness.diagnostics(runs[:1], ["K=0 seed 1"], args).splitlines()
    assert table[0] == "| run | entropy | approx_kl | clipfrac |"
    assert table[2] == "| K=0 seed 1 | 1.150 | 0.0085 | 0.085 |"


def test_staleness_runner_commands_read_as_their_objectives_and_its_figure_draws_what_it_finds(tmp_path, capsys):
    """Each command, read by its script's own parser, is the objective it stands for; runs found finished in --runs-dir
    (synthetic: the sweep trains end to end in the fig2 test below) are skipped, tabulated and drawn."""
    staleness = load_experiment("fig1_staleness")
    argv = ["--tiny", "--staleness-values", "2", "--variants", "recent", "decoupled", "--runs-dir", str(tmp_path)]
    for run in staleness.build_runs(staleness.parse_args(argv)):
        config = vars(load(run.script).parse_args(sweep.command(run, tmp_path)[2:]))
        assert config["staleness"] == 2 and config["total_timesteps"] == 512 and config["num_envs"] == 4
        assert (config.get("old_policy"), config.get("prox")) == (("recent", None) if run.tags["variant"] == "recent"
                                                                   else (None, "recent"))
        write_run(tmp_path, "starpilot", run.exp_name, 1, [1.0, 2.0, 3.0, 4.0], config=recorded_config(run))
    figure, summary = staleness.main(argv)
    out = capsys.readouterr().out
    assert out.count("skip (finished)") == 2 and "start on cores" not in out
    assert os.path.getsize(figure) > 0 and figure.endswith(".png")
    rows = list(csv.DictReader(open(summary)))
    assert sorted((r["variant"], r["staleness"], r["env"], r["seed"]) for r in rows) == [
        ("decoupled", "2", "starpilot", "1"), ("recent", "2", "starpilot", "1")]
    for row in rows:  # the last 10% of 4 iterations: the 4th
        assert float(row["final_return"]) == 4.0 and float(row["global_step"]) == 512
        assert float(row["normalized"]) == pytest.approx(analysis.normalized_return(4.0, "starpilot", "easy"))


def test_cpu_preset_end_to_end_commits_plans_resumes_and_skips(tmp_path, capsys):
    # The --cpu path on the tiny config: C = 1 and 4 of 4 envs x 32 steps, PPO-EWMA with --save-model; 128 env
    # steps are 1 iteration at C = 1 and 4 at C = 4
    batch_size = load_experiment("fig2_batch_size")
    runs_dir, committed = tmp_path / "runs", tmp_path / "committed"
    argv = ["--cpu", "--tiny", "--variants", "all", "--runs-dir", str(runs_dir), "--committed", str(committed)]
    figure, summary = batch_size.main(argv + ["--total-timesteps", "128"])
    out = capsys.readouterr().out
    assert out.count("start on cores") == 2 and out.count("done in") == 2 and out.count("committed to") == 2
    folders = sorted(os.listdir(committed))
    assert len(folders) == 2
    assert all(sorted(os.listdir(committed / f)) == ["config.json", "progress.csv"] for f in folders)
    assert all(os.path.isfile(runs_dir / f / sweep.CHECKPOINT) for f in folders)  # checkpoints stay in runs_dir
    rows = list(csv.DictReader(open(summary)))
    assert os.path.basename(summary) == "fig2_cpu_diagnostics.csv" and os.path.getsize(figure) > 0
    assert [(r["variant"], r["C"], r["envs"], r["run"]) for r in rows] == [("all", "1", "4", folders[0]),  # div1
                                                                          ("all", "4", "1", folders[1])]  # div4
    assert [float(r["learning_rate"]) for r in rows] == pytest.approx([5e-4, 5e-4 / 2])  # Adam step size / sqrt(C)
    assert all(float(r["wall_time_s"]) > 0 and r["clipfrac"] != "" for r in rows)
    assert "| variant | C | seed | envs | learning_rate |" in out  # the table, as Markdown
    assert "| env steps | C=1 | C=4 |" in out  # and the return per window of env steps, a column per run
    # asked for more steps: both runs are planned to go on from their checkpoints (a resume: test_checkpoint.py)
    assert batch_size.main(argv + ["--total-timesteps", "256", "--dry-run"]) is None
    out = capsys.readouterr().out
    assert "2 runs planned, 2 still to train" in out and out.count(" --resume ") == 2
    assert all(f"--resume {runs_dir / folder} --total-timesteps 256" in out for folder in folders)
    # a fresh checkout (no runs/): nothing to train, the figure from the committed runs alone
    shutil.rmtree(runs_dir)
    figure, summary = batch_size.main(argv + ["--total-timesteps", "128"])
    out = capsys.readouterr().out
    assert out.count("skip (committed)") == 2 and "start on cores" not in out
    assert len(list(csv.DictReader(open(summary)))) == 2


# --- Fig. 4 at CPU scale: the pilots pick the games, the paired test ------------------------------------------
def test_t_quantiles_and_the_paired_test_by_hand():
    # Student's t, two-sided 95% (any printed table): df 1, 2, 3, 5, 10, 30
    for df, table in ((1, 12.706), (2, 4.303), (3, 3.182), (5, 2.571), (10, 2.228), (30, 2.042)):
        assert analysis.t_quantile(0.975, df) == pytest.approx(table, abs=5e-4)
    assert analysis.t_cdf(1.0, 1) == pytest.approx(0.75)  # the Cauchy: 1/2 + atan(1)/pi
    # 0.1, 0.2, -0.05, 0.3: mean 0.1375, sd (ddof 1) sqrt(0.066875 / 3), s.e. that / 2, interval +- 3.182 s.e.;
    # 3 positive of 4: P(X >= 3) = 5/16, two-sided 0.625
    test = analysis.paired_test([0.1, 0.2, -0.05, 0.3])
    sem = math.sqrt(0.066875 / 3) / 2
    assert (test["n"], test["mean"], test["sem"]) == (4, pytest.approx(0.1375), pytest.approx(sem))
    assert (test["low"], test["high"]) == (pytest.approx(0.1375 - 3.1824 * sem, abs=1e-4),
                                          pytest.approx(0.1375 + 3.1824 * sem, abs=1e-4))
    assert (test["verdict"], test["positive"], test["signed"], test["sign_p"]) == ("level", 3, 4, 0.625)
    # all eight above 0 and tight: ahead, p = 2 / 2**8; four below: behind, p = 2 / 2**4 (two-sided); a zero drops out
    # of the sign test (2 of 2: p = 2 / 2**2); an even split's doubled tail, 2 x 3/4, is capped at 1
    assert analysis.paired_test([0.1, 0.12, 0.09, 0.11, 0.1, 0.13, 0.08, 0.1])["verdict"] == "ahead"
    below = analysis.paired_test([-0.1, -0.12, -0.09, -0.11])
    assert (below["verdict"], below["positive"], below["sign_p"]) == ("behind", 0, 2 / 2 ** 4)
    assert analysis.paired_test([1.0] * 8)["sign_p"] == 2 / 2 ** 8
    with_zero = analysis.paired_test([0.0, 1.0, 2.0])
    assert (with_zero["signed"], with_zero["positive"], with_zero["sign_p"]) == (2, 2, 0.5)
    assert analysis.paired_test([0.1, -0.1])["sign_p"] == 1.0
    assert analysis.paired_test([0.3])["verdict"] == "level"  # one pair: no interval


def test_fig4_cpu_compares_its_games_then_those_the_pilots_rank_first(tmp_path, capsys):
    ewma = load_experiment("fig4_ewma_vs_baseline")
    runs_dir, committed = tmp_path / "runs", tmp_path / "committed"
    argv = ["--cpu", "--tiny", "--runs-dir", str(runs_dir), "--committed", str(committed)]
    args = ewma.parse_args(argv)
    maze, heist, leaper = ewma.pilot_runs(args)  # 2 iterations of 4 envs x 32 steps, at the scripts' defaults
    assert (maze.env_id, heist.env_id, maze.total_timesteps, maze.exp_name) == ("maze", "heist", 256, "ppo")
    assert all(maze.options[k] == v for k, v in sweep.DEFAULTS["ppo"].items())
    assert ewma.UNTUNED == ("leaper", "maze", "bigfish", "heist", "climber", "plunder", "ninja", "bossfight")
    # heist rises more in raw return (1.2 against 1.0), maze more in normalised return: 1.0 / (10 - 5) = 0.2 against
    # 1.2 / (10 - 3.5) = 0.185 (easy mode's constants); leaper is compared anyway (the preset's games)
    write_run(committed, "maze", "ppo", 1, [6.0, 7.0], config=recorded_config(maze))
    write_run(committed, "leaper", "ppo", 1, [3.0, 3.0], config=recorded_config(leaper))
    assert ewma.main(argv + ["--dry-run"]) is None  # heist's pilot is still to do: leaper's runs only
    out = capsys.readouterr().out
    assert "--env-id heist" in out and "2 of 3 pilots finished" in out and "Compared" not in out
    assert "2 runs planned, 2 still to train" in out
    write_run(committed, "heist", "ppo", 1, [4.0, 5.2], config=recorded_config(heist))
    assert ewma.main(argv + ["--dry-run", "--seeds", "1", "2"]) is None
    out = capsys.readouterr().out
    assert "| maze | 6.00 | 7.00 | +0.200 |" in out and "| heist | 4.00 | 5.20 | +0.185 |" in out
    assert "Compared: leaper, maze" in out and "8 runs planned, 8 still to train" in out
    planned = [line.split()[1:6:2] for line in out.splitlines() if line.startswith(sys.executable)]
    # game by game, seed by seed, a pair's two runs one after the other: the order they train in, one at a time
    assert [(os.path.basename(script), env, seed) for script, env, seed in planned] == [
        (script, env, seed) for env in ("leaper", "maze") for seed in ("1", "2")
        for script in ("ppo.py", "ppo_ewma.py")]
    # maze's seed-1 run trained after the pick, from scratch (its pilot's checkpoint was on another machine), is longer
    # and newer: the pilots' table and the pick stay those of the pilot, the earliest finished run
    later = write_run(tmp_path / "later", "maze", "ppo", 1, [1.0] * 4, config={**recorded_config(maze),
                                                                                "total_timesteps": 512})
    shutil.move(later, committed / "maze__ppo__1__2001")
    assert ewma.main(argv + ["--dry-run", "--seeds", "1", "2"]) is None
    out = capsys.readouterr().out
    assert "| maze | 6.00 | 7.00 | +0.200 |" in out and "Compared: leaper, maze" in out


def test_fig4_cpu_tables_give_the_last_tenth_of_each_run_and_the_paired_test_by_hand(tmp_path, capsys, monkeypatch):
    ewma = load_experiment("fig4_ewma_vs_baseline")
    committed, gpu = tmp_path / "committed", tmp_path / "gpu"  # PPO-EWMA's runs made on a GPU, as data/runs/gpu
    monkeypatch.setitem(ewma.TINY_CPU, "records", [str(committed), str(gpu)])
    monkeypatch.setitem(ewma.TINY_CPU, "games", ["maze"])
    monkeypatch.setitem(ewma.TINY_CPU, "pick", 0)
    argv = ["--cpu", "--tiny", "--runs-dir", str(tmp_path / "runs"), "--committed", str(committed),
            "--out-dir", str(tmp_path), "--seeds", "1", "2"]
    args = ewma.parse_args(argv)
    for pilot in ewma.pilot_runs(args):  # maze alone is compared
        returns = {"maze": [1.0, 9.0], "heist": [4.0, 5.0], "leaper": [5.0, 4.0]}[pilot.env_id]
        write_run(committed, pilot.env_id, "ppo", 1, returns + [3.0, 6.0], config=recorded_config(pilot))
    jobs = {(j.script, j.seed): j for j in ewma.comparison_runs(args, ["maze"])}
    # 4 iterations of 128 env steps: the last tenth of 512, (460.8, 512], is the 4th iteration alone
    write_run(committed, "maze", "ppo", 2, [2.0, 2.0, 2.0, 8.0], config=recorded_config(jobs["ppo", 2]))
    write_run(gpu, "maze", "ppo_ewma", 1, [5.0, 5.0, 5.0, 9.0], config=recorded_config(jobs["ppo_ewma", 1]))
    write_run(gpu, "maze", "ppo_ewma", 2, [5.0, 5.0, 5.0, 10.0], config=recorded_config(jobs["ppo_ewma", 2]))
    assert ewma.main(argv + ["--dry-run"]) is None and "Compared: maze\n" in capsys.readouterr().out
    figure, summary = ewma.main(argv + ["--plot-only"])
    out = capsys.readouterr().out
    assert "| maze | 1 2 | 6.00, 8.00 | 9.00, 10.00 |" in out  # PPO 6 and 8, PPO-EWMA 9 and 10
    # maze (easy) is [5, 10]: d = 3 / 5 and 2 / 5, mean 0.5, s.e. 0.1, t(1) = 12.706: [-0.771, +1.771], level
    assert "| maze | 1 2 | +0.600, +0.400 | +0.500 | [-0.771, +1.771] | level |" in out
    assert "| 2 pairs, 1 games | +0.5000 | 0.1000 | [-0.771, +1.771] | level | 2 of 2 | 0.500 |" in out
    assert "| (0, 100k] | 4.75 | 3.50 | 6.00 | 6.25 |" in out  # per 100k: PPO seeds 1, 2, then PPO-EWMA's
    assert os.path.getsize(figure) > 0 and len(list(csv.DictReader(open(summary)))) == 4


def test_fig1_cpu_takes_the_readme_run_at_k0_for_every_objective_and_tabulates_the_last_tenth(tmp_path, capsys):
    staleness = load_experiment("fig1_staleness")
    committed = tmp_path / "committed"
    argv = ["--cpu", "--tiny", "--runs-dir", str(tmp_path / "runs"), "--committed", str(committed),
            "--out-dir", str(tmp_path)]
    runs = staleness.build_runs(staleness.parse_args(argv))
    at_0 = {(r.script, r.exp_name) for r in runs if r.tags["staleness"] == 0}
    control_0 = ("ppo_ewma", "fig1__ppo_ewma__prox-recent-no-clip-vloss__stale0")
    assert at_0 == {("ppo", sweep.README_EXP_NAMES["ppo"]), control_0}
    assert len(sweep.unique_runs(runs)) == 23
    assert {r.seed for r in runs if r.tags["staleness"] == 0} == {1, 2}  # the README's two ppo.py runs, the control's
    control = sweep.DEFAULTS["ppo_ewma"] | {"clip_vloss": False, "prox": "recent"}
    controls = [r for r in runs if r.tags["variant"] == "noclip"]
    assert sorted((r.exp_name, r.seed) for r in controls) == [
        (f"fig1__ppo_ewma__prox-recent-no-clip-vloss__stale{k}", s) for k in (0, 4, 8) for s in (1, 2)]
    assert all(r.options[k] == v for r in controls for k, v in control.items())
    assert all(r.options["staleness"] == r.tags["staleness"] for r in controls)
    assert all(r.options[k] == v for r in runs if r not in controls for k, v in sweep.DEFAULTS[r.script].items())
    # seed 2 at K = 8, 4 and 2
    second = {(r.script, r.exp_name) for r in runs if r.seed == 2 and r.tags["staleness"]}
    assert second == {("ppo", "fig1__ppo__old-recent__stale8"), ("ppo_ewma", "fig1__ppo_ewma__prox-recent__stale8"),
                      ("ppo_ewma", "fig1__ppo_ewma__prox-recent__stale2"), ("ppo", "fig1__ppo__old-recent__stale2"),
                      ("ppo", "fig1__ppo__old-behav__stale2"),
                      ("ppo", "fig1__ppo__old-behav__stale8"),
                      ("ppo_ewma", "fig1__ppo_ewma__prox-recent-no-clip-vloss__stale8"),
                      ("ppo_ewma", "fig1__ppo_ewma__prox-recent-no-clip-vloss__stale4"),
                      ("ppo_ewma", "fig1__ppo_ewma__prox-recent__stale4"), ("ppo", "fig1__ppo__old-recent__stale4"),
                      ("ppo", "fig1__ppo__old-behav__stale4")}
    # all three at K = 4 and the control, two seeds each
    knee = {(r.script, r.exp_name) for r in runs if r.tags["staleness"] == 4}
    assert knee == {("ppo_ewma", "fig1__ppo_ewma__prox-recent__stale4"), ("ppo", "fig1__ppo__old-recent__stale4"),
                    ("ppo", "fig1__ppo__old-behav__stale4"),
                    ("ppo_ewma", "fig1__ppo_ewma__prox-recent-no-clip-vloss__stale4")}
    # 4 iterations of 128: the last tenth is the 4th alone
    returns = {(0, 1): [1.0, 2.0, 3.0, 4.0], (0, 2): [1.0, 2.0, 3.0, 6.0], ("recent", 2): [1.0, 1.0, 1.0, 0.5],
               ("decoupled", 2): [1.0, 2.0, 3.0, 5.0], ("behav", 2): [1.0, 2.0, 2.0, 2.5],
               ("noclip", 8, 1): [1.0, 1.0, 1.0, 3.0], ("noclip", 8, 2): [1.0, 1.0, 1.0, 5.0],
               ("noclip", 4, 1): [1.0, 1.0, 1.0, 2.0], ("noclip", 4, 2): [1.0, 1.0, 1.0, 4.0],
               ("noclip", 0, 1): [9.0, 9.0, 9.0, 7.0], ("noclip", 0, 2): [9.0, 9.0, 9.0, 9.0],
               ("recent", 8): [1.0, 1.0, 1.0, 1.5], ("decoupled", 8): [1.0, 1.0, 1.0, 2.0], ("behav", 8): [1.0] * 4,
               ("decoupled", 4): [1.0, 1.0, 1.0, 4.0], ("recent", 4): [1.0, 1.0, 1.0, 1.0],
               ("behav", 4): [1.0, 1.0, 1.0, 3.0]}
    for run in sweep.unique_runs(runs):
        key = (run.tags["variant"], run.tags["staleness"])
        key = (0, run.seed) if run.exp_name == sweep.README_EXP_NAMES["ppo"] else key
        key = (*key, run.seed) if key[0] == "noclip" else key
        write_run(committed, "starpilot", run.exp_name, run.seed, returns[key], config=recorded_config(run))
    figure, summary = staleness.main(argv + ["--plot-only"])
    out = capsys.readouterr().out
    assert "| (a) PPO, old = recent | 5.00 | 0.50 | 1.00 | 1.50 |" in out and os.path.getsize(figure) > 0  # K = 0: 4, 6
    assert "| (b) decoupled, prox = recent | 5.00 | 5.00 | 4.00 | 2.00 |" in out
    assert "| (c) PPO, old = behav | 5.00 | 2.50 | 3.00 | 1.00 |" in out
    # the control at its own K: 7 and 9, 2 and 4, 3 and 5; fresh PPO from the README's runs alone (4 and 6 at K = 0)
    assert "| (b) without the value clip | 8.00 |  | 3.00 | 4.00 |" in out
    assert "| fresh PPO after as many updates | 5.00 | 2.00 |" in out
    assert ("| env steps | K=0 (all) seed 1 | K=0 (all) seed 2 | K=0 noclip seed 1 | K=0 noclip seed 2 | "
            "K=2 recent seed 1 | K=2 recent seed 2 | K=2 decoupled seed 1 | K=2 decoupled seed 2 | K=2 behav seed 1 | "
            "K=2 behav seed 2 | K=4 recent seed 1 | K=4 recent seed 2 | K=4 decoupled seed 1 | K=4 decoupled seed 2 | "
            "K=4 behav seed 1 | K=4 behav seed 2 | K=4 noclip seed 1 | K=4 noclip seed 2 | K=8 recent seed 2 | "
            "K=8 decoupled seed 2 | K=8 behav seed 2 | K=8 noclip seed 1 | K=8 noclip seed 2 |") in out
    assert len(list(csv.DictReader(open(summary)))) == 27  # the K = 0 runs once per objective
