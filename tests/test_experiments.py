"""experiments/: plotting, grouping and normalisation on synthetic run folders, the runners' commands,
resumable sweeps, and one real end-to-end sweep of the staleness runner on the tiny config."""
import csv
import json
import math
import os

import numpy as np
import pytest

from conftest import ROOT, load

EXPERIMENTS = os.path.join(ROOT, "experiments")


def load_experiment(name):
    """experiments/<name>.py, imported under its own name (the runners `import sweep` etc. too)."""
    return load(name, EXPERIMENTS)


# The shared modules, analysis first: figures and sweep import it by name, and experiments/ is not on
# sys.path until a runner puts it there.
analysis = load_experiment("analysis")
figures = load_experiment("figures")
sweep = load_experiment("sweep")


def write_run(parent, env_id, exp_name, seed, returns, batch=128, mode="easy", extra=None, config=None,
              seconds_per_iteration=2.0):
    """A run folder as the scripts write it; `returns` holds None where no episode ended."""
    run_dir = os.path.join(str(parent), f"{env_id}__{exp_name}__{seed}__{1000 + seed}")
    os.makedirs(run_dir)
    with open(os.path.join(run_dir, "config.json"), "w") as f:
        json.dump({"env_id": env_id, "exp_name": exp_name, "seed": seed, "distribution_mode": mode, "num_envs": 4,
                   "num_steps": batch // 4, "batch_divisor": 1, **(config or {})}, f)
    columns = ["iteration", "global_step", "time_s", "sps", "episodic_return", "episodic_length"] + list(extra or {})
    with open(os.path.join(run_dir, "progress.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        for i, ret in enumerate(returns):
            row = {"iteration": i + 1, "global_step": (i + 1) * batch, "time_s": (i + 1) * seconds_per_iteration,
                   "sps": batch / seconds_per_iteration, "episodic_return": "" if ret is None else ret,
                   "episodic_length": "" if ret is None else 50}
            row.update({k: ("" if v[i] is None else v[i]) for k, v in (extra or {}).items()})
            writer.writerow(row)
    return run_dir


def has(cmd, flag, value):
    """`flag value` appears as adjacent tokens of the command."""
    return any(a == flag and b == value for a, b in zip(cmd, cmd[1:]))


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
    assert set(groups) == {("a", "starpilot"), ("b", "starpilot"), ("a", "bigfish")}
    assert [r["config"]["seed"] for r in groups[("a", "starpilot")]] == [1, 2, 3]
    stats = analysis.mean_curve([analysis.curve(r) for r in groups[("a", "starpilot")]])
    np.testing.assert_allclose(stats["x"], [128, 256, 384, 512])
    np.testing.assert_allclose(stats["mean"], [(1 + 3 + 2) / 3, (2 + 6 + 3) / 3, (3 + 5 + 4) / 3, (4 + 8 + 6) / 3])
    np.testing.assert_allclose(stats["std"][0], np.std([1, 3, 2]))
    np.testing.assert_allclose(stats["min"], [1, 2, 3, 4])
    np.testing.assert_allclose(stats["max"], [3, 6, 5, 8])


def test_mean_curve_interpolates_runs_with_gaps(tmp_path):
    write_run(tmp_path, "starpilot", "a", 1, [1, None, 3, 5])
    write_run(tmp_path, "starpilot", "a", 2, [3, 4, None, 7])
    runs = analysis.group_runs(analysis.load_runs(str(tmp_path)))[("a", "starpilot")]
    stats = analysis.mean_curve([analysis.curve(r) for r in runs], points=4)
    np.testing.assert_allclose(stats["x"], [128, 256, 384, 512])
    # seed 1 at 256 interpolates (128, 1)-(384, 3) to 2; seed 2 at 384 interpolates (256, 4)-(512, 7) to 5.5
    np.testing.assert_allclose(stats["mean"], [(1 + 3) / 2, (2 + 4) / 2, (3 + 5.5) / 2, (5 + 7) / 2])


def test_curves_by_tag_smooth_each_value_over_its_own_window(tmp_path):
    # Fig. 2 smooths divisor C over C times as many iterations: here C=1 unsmoothed, C=2 over 2 iterations
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    for c in (1, 2):
        write_run(tmp_path, "starpilot", f"div{c}", 1, [2.0, 4.0, 8.0, 16.0], mode="other")
    loaded = analysis.load_runs(str(tmp_path))
    for run in loaded:
        run["tags"] = {"divisor": int(run["config"]["exp_name"][3:])}
    fig, ax = plt.subplots()
    figures.plot_curves_by(ax, loaded, "divisor", [1, 2], str, lambda c: c, normalize=False)
    lines = {line.get_label(): line.get_ydata() for line in ax.get_lines()}
    np.testing.assert_allclose(lines["1"], [2, 4, 8, 16])
    np.testing.assert_allclose(lines["2"], [2, 3, 6, 12])
    plt.close(fig)


def test_dedupe_keeps_the_run_that_got_furthest(tmp_path):
    write_run(tmp_path / "x", "starpilot", "a", 1, [1, 2])
    write_run(tmp_path / "y", "starpilot", "a", 1, [1, 2, 3, 4])
    groups = analysis.group_runs(analysis.load_runs(str(tmp_path)))
    assert len(groups[("a", "starpilot")]) == 1 and len(groups[("a", "starpilot")][0]["rows"]) == 4


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
def test_plot_draws_png_with_seed_groups_and_eval_curve(tmp_path, capsys):
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
    with pytest.raises(SystemExit) as exit_info:
        plot.main([str(tmp_path / "out"), "-o", str(tmp_path / "c.png")])
    assert exit_info.value.code == 2 and "no run folders" in capsys.readouterr().err


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
    assert len(paper.envs) == 16 and paper.seeds == [1, 2, 3, 4] and paper.runs_dir == "runs/fig1"
    assert len(sweep.unique_runs(staleness.build_runs(paper))) == 16 * 4 * (1 + 5 + 5 + 6)
    quick = staleness.parse_args(["--quick"])
    assert quick.runs_dir == "runs/fig1_quick" and quick.distribution_mode == "easy" and quick.parallel == 2


def test_batch_size_runner_commands():
    batch_size = load_experiment("fig2_batch_size")
    args = batch_size.parse_args(["--divisors", "1", "4", "--seeds", "1", "--envs", "starpilot", "--num-envs", "64",
                                  "--variants", "all", "no-lr", "ppg"])
    cmds = {(r.tags["variant"], r.tags["divisor"]): sweep.command(r, "/tmp/r") for r in batch_size.build_runs(args)}
    ablation = cmds[("no-lr", 4)]
    assert ablation[1].endswith("ppg_ewma.py") and " --batch-divisor 4 --no-adjust lr" in " ".join(ablation)
    assert has(cmds[("all", 4)], "--batch-divisor", "4") and "--no-adjust" not in cmds[("all", 4)]
    assert cmds[("no-lr", 1)] == cmds[("all", 1)]  # nothing to adjust at C = 1: the ablation is the full run
    assert cmds[("ppg", 4)][1].endswith(os.sep + "ppg.py") and has(cmds[("ppg", 4)], "--batch-divisor", "4")
    with pytest.raises(SystemExit):
        batch_size.parse_args(["--divisors", "3", "--num-envs", "64"])


def test_ewma_runner_commands():
    ewma = load_experiment("fig4_ewma_vs_baseline")
    args = ewma.parse_args(["--quick", "--runs-dir", "/tmp/x"])
    cmds = {r.script: sweep.command(r, args.runs_dir) for r in ewma.build_runs(args)}
    assert sorted(cmds) == sorted(sweep.SCRIPTS)
    assert all(has(c, "--num-envs", "16") and has(c, "--distribution-mode", "easy") for c in cmds.values())
    assert has(cmds["ppg"], "--n-pi", "8") and "--n-pi" not in cmds["ppo"]
    assert has(cmds["ppg_ewma"], "--exp-name", "fig4__ppg_ewma")


# --- Resumable sweeps ----------------------------------------------------------------------------------
def test_finished_runs_are_recognised_and_skipped(tmp_path):
    run = sweep.Run("ppo", "starpilot", 1, "fig1__ppo__stale0", 512,
                    {"distribution_mode": "easy", "num_envs": 4, "num_steps": 32, "staleness": 0, "cuda": False})
    assert not sweep.is_finished(run, str(tmp_path))
    short = write_run(tmp_path, "starpilot", run.exp_name, 1, [1, 2, 3], config={"staleness": 0})
    assert not sweep.is_finished(run, str(tmp_path))  # 384 of 512 steps: interrupted
    done = write_run(tmp_path / "other", "starpilot", run.exp_name, 1, [1, 2, 3, 4], config={"staleness": 0})
    os.rename(done, os.path.join(str(tmp_path), os.path.basename(done) + "0"))
    assert sweep.find_finished(run, str(tmp_path)).endswith("0") and os.path.isdir(short)
    hard = sweep.Run(**{**run.__dict__, "options": {**run.options, "distribution_mode": "hard"}})
    assert not sweep.is_finished(hard, str(tmp_path))  # same name, different configuration
    log = []
    assert sweep.run_all([run, run], str(tmp_path), parallel=2, log=log.append) == []
    assert log == [f"skip (finished): starpilot {run.exp_name} seed 1"]


def test_core_slots_split_the_cores():
    cores = sorted(os.sched_getaffinity(0))
    assert sweep.core_slots(1) == [cores]
    slots = sweep.core_slots(2, cores_per_run=1)
    assert all(len(s) == 1 for s in slots) and (len(cores) < 2 or slots[0] != slots[1])


# --- End to end: two real tiny runs through the staleness runner ----------------------------------------
def test_staleness_runner_end_to_end(tmp_path, capsys):
    staleness = load_experiment("fig1_staleness")
    argv = ["--tiny", "--staleness-values", "2", "--variants", "recent", "decoupled", "--runs-dir", str(tmp_path)]
    figure, summary = staleness.main(argv)
    out = capsys.readouterr().out
    assert out.count("start on cores") == 2 and out.count("done in") == 2  # two runs at a time, each pinned
    assert os.path.getsize(figure) > 0 and figure.endswith(".png")
    rows = list(csv.DictReader(open(summary)))
    assert sorted((r["variant"], r["staleness"], r["env"], r["seed"]) for r in rows) == [
        ("decoupled", "2", "starpilot", "1"), ("recent", "2", "starpilot", "1")]
    for row in rows:
        config = json.load(open(os.path.join(row["run_dir"], "config.json")))
        assert config["staleness"] == 2 and config["total_timesteps"] == 512 and config["num_envs"] == 4
        assert (config.get("old_policy"), config.get("prox")) == (("recent", None) if row["variant"] == "recent"
                                                                   else (None, "recent"))
        assert float(row["global_step"]) == 512
        if row["final_return"] != "nan":
            assert float(row["normalized"]) == pytest.approx(analysis.normalized_return(float(row["final_return"]),
                                                                                        "starpilot", "easy"))
    run_dirs = sorted(d for d in os.listdir(tmp_path) if d.startswith("starpilot__"))
    assert len(run_dirs) == 2 and len(os.listdir(tmp_path / "logs")) == 2
    staleness.main(argv)  # again: both runs are finished, nothing is trained
    assert capsys.readouterr().out.count("skip (finished)") == 2
    assert sorted(d for d in os.listdir(tmp_path) if d.startswith("starpilot__")) == run_dirs
