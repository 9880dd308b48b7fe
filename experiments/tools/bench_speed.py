"""Speed benchmark: how fast each script trains, and how close that is to what this machine allows.

    python experiments/tools/bench_speed.py                  # the four scripts at the defaults: 1 + 2 iterations
    python experiments/tools/bench_speed.py --options "" " --micro-batch-size 0" " --bf16"  # leading space: not a flag
    python experiments/tools/bench_speed.py --pieces         # env step, forward, update; PPG's aux phase piece by piece
    python experiments/tools/bench_speed.py --micro-sweep 16 32 64 128  # ppo.py's, ppo_ewma.py's update per micro-batch

Runs mode: each script (with each option set) trains --warmup + --iterations iterations in its own process, in a
temporary folder (nothing is written here: the tables go to the console);
the per-iteration `sps` and time split are read back from progress.csv, skipping --warmup iterations.
With --repeats R every script runs R times, in alternating order (ppo, ppo_ewma, ..., then reversed), and
each figure is the median over all R x --iterations measured iterations.
PPG scripts run with --n-pi 1, so that every iteration has its auxiliary phase and iterations are alike: the aux
phase's work per env step does not depend on N_pi (every trajectory is trained on E_aux times, in minibatches of
num_envs/16 trajectories), so a PPG row is its speed at the defaults, a full aux phase in every iteration.
The update's and the aux phase's GFLOP/s are the FLOPs of their first call (counted with torch's FlopCounterMode in
the warm-up iteration: convolutions and matmuls, forward and backward) over each measured call's seconds: how close
each comes to what the hardware does, e.g. the aux phase against ppo.py's update.
With --cleanrl "PYTHON PATH/ppo_procgen.py" CleanRL's script runs too, unmodified, at the same envs and steps (its
rate from the cumulative `SPS:` it prints after each iteration). Ratios are within one run of this benchmark, on
the machine its first line names: compare only those. On a 2-core Intel Xeon the first command's 3 iterations of
each script come to about 40 min (derived from the rates in data/bench/both_cores.log, start-up aside).
"""
import argparse
import csv
import glob
import importlib
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # experiments/
# importing sweep puts ROOT, the scripts' folder, on sys.path
from sweep import COUNT, NATURAL, PROCGEN_GAMES, ROOT, SCRIPTS  # noqa: E402


def run_script(script, options, args, workdir):
    """Train `script` for warm-up + measured iterations in a child process (child_main) that times its pieces;
    per measured iteration: sps (progress.csv) and the seconds of env steps, rollout forwards, update and aux phase."""
    iterations = args.warmup + args.iterations
    batch = args.num_envs * args.num_steps
    argv = ["--env-id", args.env_id, "--num-envs", str(args.num_envs), "--num-steps", str(args.num_steps),
            "--total-timesteps", str(iterations * batch), "--runs-dir", workdir, "--exp-name", f"bench_{script}",
            "--no-save-model"] + (["--n-pi", "1"] if script.startswith("ppg") else [])
    cmd = [sys.executable, os.path.abspath(__file__), "--child", script] + argv + shlex.split(options)
    proc = subprocess.run(cmd + shlex.split(args.extra), capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"bench_speed.py: {' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    times = json.loads(proc.stdout.split("PIECES ")[-1])
    run_dir = max(glob.glob(os.path.join(workdir, f"*__bench_{script}__*")), key=os.path.getmtime)
    rows = list(csv.DictReader(open(os.path.join(run_dir, "progress.csv"))))
    gflop = {name: count / 1e9 for name, count in times["flops"].items()}
    rows = [{"sps": float(r["sps"]), "env_s": times["env_s"][i], "rollout_fwd_s": times["rollout_fwd_s"][i],
             "update_s": times["update_s"][i], "aux_s": float(r.get("aux_time_s") or 0)}
            for i, r in enumerate(rows) if i >= args.warmup]
    for r in rows:  # the rate of the floating-point work: the first call's FLOPs over this call's seconds
        r["update_gflops"] = gflop["update"] / r["update_s"]
        r["aux_gflops"] = gflop["aux_phase"] / r["aux_s"] if "aux_phase" in gflop else float("nan")
    return rows


def run_cleanrl(args, workdir):
    """CleanRL's ppo_procgen.py (args.cleanrl: the command that runs it) for warm-up + measured iterations, in
    workdir (it writes its TensorBoard folder there). It prints after iteration k `SPS: k x batch / elapsed_k`, so
    elapsed_k = k x batch / SPS_k; per measured iteration: batch / (elapsed_k - elapsed_k-1)."""
    iterations, batch = args.warmup + args.iterations, args.num_envs * args.num_steps
    cmd = shlex.split(args.cleanrl) + ["--env-id", args.env_id, "--num-envs", str(args.num_envs), "--num-steps",
                                       str(args.num_steps), "--total-timesteps", str(iterations * batch), "--seed", "1"]
    proc = subprocess.run(cmd + (["--no-cuda"] if "--no-cuda" in args.extra else []), capture_output=True, text=True,
                          cwd=workdir)
    sps = [int(line.split()[1]) for line in proc.stdout.splitlines() if line.startswith("SPS:")]
    if proc.returncode != 0 or len(sps) < iterations:
        sys.exit(f"bench_speed.py: {' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    elapsed = [0.0] + [(k + 1) * batch / rate for k, rate in enumerate(sps)]
    nan = float("nan")
    return [{"sps": batch / (elapsed[k + 1] - elapsed[k]), "env_s": nan, "rollout_fwd_s": nan, "update_s": nan,
             "aux_s": nan, "update_gflops": nan, "aux_gflops": nan} for k in range(args.warmup, iterations)]


def machine(args):
    """One line naming what ran: CPU model and cores, the GPU if the runs use one, torch, Python, the commit."""
    import torch
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor()) if os.path.exists("/proc/cpuinfo") else platform.processor()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    gpu = (torch.cuda.get_device_name() if torch.cuda.is_available() and "--no-cuda" not in args.extra
           else "no GPU used")
    commit = os.environ.get("BENCH_COMMIT") or subprocess.run(  # gpu_check.sh's: a copied tree's .git may be stale
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip() or "unknown"
    return (f"{cpu}, {cores} cores; {gpu}; torch {torch.__version__}, Python {platform.python_version()}; "
            f"commit {commit}")


def child_main(script, argv):
    """In the child: import `script`, wrap its env step, collect_rollout and update with timers (the scripts keep no
    timing columns), count the floating-point operations of the first update and aux phase (a warm-up iteration's:
    the counter slows them), train, and print the seconds of each call and the FLOPs as one JSON line after "PIECES
    "."""
    from torch.utils.flop_counter import FlopCounterMode
    module = importlib.import_module(script)
    times, env = {"env_s": [], "rollout_fwd_s": [], "update_s": [], "flops": {}}, [0.0]

    def counted(name):  # every call does the same work: its first call, counted, gives the FLOPs of each
        original = getattr(module, name)

        def wrapper(*a, **k):
            if name in times["flops"]:
                return original(*a, **k)
            with FlopCounterMode(display=False) as counter:
                out = original(*a, **k)
            times["flops"][name] = counter.get_total_flops()
            return out
        setattr(module, name, wrapper)
    for name in ("update", "aux_phase"):
        if hasattr(module, name):
            counted(name)

    def timed(owner, name, done):
        original = getattr(owner, name)

        def wrapper(*a, **k):
            start = time.perf_counter()
            out = original(*a, **k)
            done(time.perf_counter() - start)
            return out
        setattr(owner, name, wrapper)

    def rollout_done(seconds):
        times["env_s"].append(env[0])
        times["rollout_fwd_s"].append(seconds - env[0])
        env[0] = 0.0
    timed(module.ProcgenVecEnv, "step", lambda seconds: env.__setitem__(0, env[0] + seconds))
    timed(module, "collect_rollout", rollout_done)
    timed(module, "update", times["update_s"].append)
    module.main(argv)
    print("PIECES " + json.dumps(times), flush=True)


def runs_mode(args):
    print(machine(args), flush=True)
    runs = [(script, options) for script in args.scripts for options in args.options]
    runs += [("cleanrl", args.cleanrl)] if args.cleanrl else []
    measured = {run: [] for run in runs}
    with tempfile.TemporaryDirectory() as workdir:
        for repeat in range(args.repeats):
            for script, options in (runs if repeat % 2 == 0 else runs[::-1]):  # interleaved: alternate the order
                rows = (run_cleanrl(args, workdir) if script == "cleanrl" else
                        run_script(script, options, args, workdir))
                measured[(script, options)] += rows
                split = " ".join(f"{k} {statistics.median(r[k] for r in rows):.2f}" for k in rows[0] if k != "sps")
                print(f"  {script} {options or '(default)'}: " + " ".join(f"{r['sps']:.0f}" for r in rows) +
                      f" SPS; medians (seconds, GFLOP/s): {split}", file=sys.stderr, flush=True)
    results = [{"script": script, "options": "ppo_procgen.py" if script == "cleanrl" else options or "(default)",
                **{k: statistics.median(r[k] for r in measured[(script, options)])
                   for k in measured[(script, options)][0]}}
               for script, options in runs]
    base = {r["options"]: r["sps"] for r in results if r["script"] == "ppo"}
    default = {r["script"]: r["sps"] for r in results if r["options"] == (args.options[0] or "(default)")}
    print(f"\n{args.num_envs} envs x {args.num_steps} steps, {args.repeats} x {args.iterations} measured iterations "
          f"after {args.warmup} warm-up, medians; {args.extra or 'default hyperparameters'}")
    header = (f"{'script':<9} {'options':<24} {'SPS':>7} {'vs ppo.py':>9} {'vs 1st opt':>10} {'env s':>7} "
              f"{'rollout fwd s':>13} {'update s':>8} {'aux s':>7} {'update GFLOP/s':>14} {'aux GFLOP/s':>11}")
    print(header + "\n" + "-" * len(header))
    for r in results:
        same = args.options[0] or "(default)" if r["script"] == "cleanrl" else r["options"]  # CleanRL: vs plain ppo.py
        vs_ppo = r["sps"] / base[same] if same in base else float("nan")
        vs_first = r["sps"] / default[r["script"]] if r["script"] in default else float("nan")
        print(f"{r['script']:<9} {r['options']:<24} {r['sps']:7.0f} {vs_ppo:9.3f} {vs_first:10.3f} "
              f"{r['env_s']:7.1f} {r['rollout_fwd_s']:13.1f} {r['update_s']:8.1f} {r['aux_s']:7.1f} "
              f"{r['update_gflops']:14.0f} {r['aux_gflops']:11.0f}")
    print("time ratio vs ppo.py = 1 / (SPS ratio); e.g. the EWMA overhead is ppo.py SPS / ppo_ewma.py SPS")


def pieces_mode(args):
    """Time the pieces on random data with the scripts' own functions: ppo.py's env step, policy forward and update
    (the implied ceiling), then ppg.py's aux phase whole and piece by piece; GFLOP/s from torch's FlopCounterMode."""
    import numpy as np
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    import ppg
    import ppo
    device = torch.device("cuda" if torch.cuda.is_available() and not args.no_cuda else "cpu")
    n, steps = args.num_envs, args.num_steps

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    def seconds(fn, repeats=1):
        sync()
        start = time.perf_counter()
        for _ in range(repeats):
            fn()
        sync()
        return (time.perf_counter() - start) / repeats

    def gflop(fn):
        with FlopCounterMode(display=False) as counter:
            fn()
        return counter.get_total_flops() / 1e9
    argv = ["--num-envs", str(n), "--num-steps", str(steps), "--cuda" if device.type == "cuda" else "--no-cuda"]
    cfg = ppo.parse_args(argv + shlex.split(args.extra))
    ppo.setup(cfg)  # the scripts' threads and micro-batch default on this device
    env = ppo.ProcgenVecEnv(args.env_id, n, "easy", 0, 0, 1)
    actions = np.random.randint(0, 15, size=n)
    env_step = seconds(lambda: env.step(actions), 100)
    agent = ppo.Agent(15).to(device)
    obs = torch.randint(0, 256, (n, 64, 64, 3), dtype=torch.uint8, device=device)
    with torch.no_grad():
        seconds(lambda: agent(obs), 3)
        eager = seconds(lambda: agent(obs), 20)
        # the rollout's forward: on a GPU one captured CUDA graph (ppo.cuda_graph), else the eager one
        rollout_forward = ppo.cuda_graph(agent, n) if device.type == "cuda" else agent
        forward = seconds(lambda: rollout_forward(obs), 20)
    b = n * steps
    batch = {"obs": torch.randint(0, 256, (b, 64, 64, 3), dtype=torch.uint8, device=device),
             "actions": torch.randint(0, 15, (b,), device=device), "advantages": torch.randn(b, device=device),
             "returns": torch.randn(b, device=device), "values": torch.zeros(b, device=device),
             "logp_behav": torch.full((b,), -2.7, device=device),
             "adv_mean": torch.tensor(0.0, device=device), "adv_std": torch.tensor(1.0, device=device)}
    batch["logp_old"] = batch["logp_behav"]
    optimizer = torch.optim.Adam(agent.parameters(), lr=cfg.learning_rate)
    update_gflop = gflop(lambda: ppo.update(agent, optimizer, batch, cfg))  # also the warm-up
    update = seconds(lambda: ppo.update(agent, optimizer, batch, cfg))
    iteration = steps * (env_step + forward) + update
    print(f"{device}, {n} envs x {steps} steps, micro-batch {cfg.micro_batch_size or 'off'}, "
          f"{torch.get_num_threads()} torch threads")
    print(f"env step ({n} envs):        {env_step * 1e3:8.2f} ms  -> rollout env time {steps * env_step:6.2f} s")
    print(f"policy forward (batch {n}): {eager * 1e3:8.2f} ms  eager, {forward * 1e3:.2f} ms as the rollout runs it "
          f"({'one CUDA graph' if device.type == 'cuda' else 'eager'})  -> rollout forwards {steps * forward:6.2f} s")
    print(f"one PPO update (random data):   {update:8.2f} s  {update_gflop / update:6.0f} GFLOP/s")
    print(f"serial ceiling: {b / iteration:,.0f} SPS for ppo.py (rollout + update, nothing else)")

    # PPG's aux phase over one iteration's trajectories (its work per env step does not depend on N_pi): whole, with
    # ppg.py's aux_phase(), then its pieces, each timed alone on the same shapes and counted per phase.
    cfg = ppg.parse_args(argv + ["--n-pi", "1"] + shlex.split(args.extra))
    ppg.setup(cfg)
    agent = ppg.Agent(15).to(device)
    aux_optimizer = torch.optim.Adam(agent.parameters(), lr=cfg.aux_learning_rate, eps=cfg.adam_eps)
    buffer = ppg.AuxBuffer(1, n, steps, device)
    buffer.add({"obs": batch["obs"], "returns": batch["returns"]}, steps)
    minibatch = cfg.aux_minibatch_trajs * steps  # frames
    micro = min(cfg.micro_batch_size or minibatch, minibatch)
    x, target = batch["obs"][:micro], batch["returns"][:micro]

    def policy_pass():
        logits, aux_value = agent.policy(x)
        (logits.logsumexp(-1).mean() + (aux_value - target).pow(2).mean()).backward()

    def value_pass():
        (agent.value(x).squeeze(-1) - target).pow(2).mean().backward()

    def pi_old_pass():
        with torch.no_grad():
            for o in batch["obs"].split(256):
                agent.logits(o)
    minibatches = cfg.e_aux * -(-n // cfg.aux_minibatch_trajs)
    passes = minibatches * -(-minibatch // micro)
    pieces = [("pi_old pass (no grad, all frames)", pi_old_pass, 1),
              (f"policy network forward + backward ({micro})", policy_pass, passes),
              (f"value network forward + backward ({micro})", value_pass, passes),
              ("Adam step (both networks)", aux_optimizer.step, minibatches)]
    whole = seconds(lambda: ppg.aux_phase(agent, aux_optimizer, buffer, cfg))
    print(f"\nppg.py's aux phase over {n} trajectories x {steps} steps: E_aux {cfg.e_aux}, minibatches of "
          f"{cfg.aux_minibatch_trajs} trajectories, micro-batch {cfg.micro_batch_size or 'off'}: {whole:.1f} s "
          f"({whole / b * 1e3:.2f} ms per env step)")
    print(f"{'piece':<48} {'s per call':>10} {'calls':>6} {'s per phase':>11} {'share':>6} {'GFLOP/s':>8}")
    total_s = total_gflop = 0.0
    for name, fn, calls in pieces:
        repeats = 1 if calls == 1 else 10
        fn()  # warm-up
        per_call, count = seconds(fn, repeats), gflop(fn)
        total_s, total_gflop = total_s + per_call * calls, total_gflop + count * calls
        print(f"{name:<48} {per_call:10.4f} {calls:6.0f} {per_call * calls:11.1f} {per_call * calls / whole:6.1%} "
              f"{count / per_call if count else float('nan'):8.0f}")
    print(f"{'sum of the pieces':<48} {'':>10} {'':>6} {total_s:11.1f} {total_s / whole:6.1%} "
          f"{total_gflop / total_s:8.0f}")
    print(f"whole aux phase: {total_gflop / whole:.0f} GFLOP/s (the pieces' FLOPs over its time), against "
          f"{update_gflop / update:.0f} GFLOP/s in ppo.py's update")


def micro_sweep_mode(args):
    """The scripts' own update() on random data, one epoch over 2 minibatches of 2048 (the default minibatch), for
    each micro-batch size: ppo.py and ppo_ewma.py alternately, --repeats times each, medians. On the CPU, with
    the threads this process may use (pin it with taskset to measure fewer), at --minibatch-by env
    --max-grad-norm 0, the settings of the timings in docs/results.md."""
    import statistics
    import torch
    import ppo
    import ppo_ewma
    torch.set_num_threads(len(os.sched_getaffinity(0)))
    size = 4096

    def make_update(module, micro):
        cfg = module.parse_args(["--num-envs", "64", "--num-steps", "64", "--num-minibatches", "2", "--update-epochs",
                                 "1", "--micro-batch-size", str(micro), "--no-cuda", "--minibatch-by", "env",
                                 "--max-grad-norm", "0"])
        torch.manual_seed(0)
        agent = module.Agent(15)
        optimizer = torch.optim.Adam(agent.parameters(), lr=cfg.learning_rate)
        g = torch.Generator().manual_seed(0)
        batch = {"obs": torch.randint(0, 256, (size, 64, 64, 3), dtype=torch.uint8, generator=g),
                 "actions": torch.randint(0, 15, (size,), generator=g), "advantages": torch.randn(size, generator=g),
                 "returns": torch.randn(size, generator=g), "values": torch.zeros(size),
                 "logp_behav": torch.full((size,), -2.7),
                 "adv_mean": torch.tensor(0.0), "adv_std": torch.tensor(1.0)}
        batch["logp_old"] = batch["logp_behav"]
        extra = (module.EWMA(agent, cfg.beta_prox),) if module is ppo_ewma else ()
        return lambda: module.update(agent, optimizer, batch, cfg, *extra)
    print(f"update() of {size} samples (2 minibatches of 2048, 1 epoch), {torch.get_num_threads()} torch threads, "
          f"median of {args.repeats} interleaved repeats")
    print(f"{'micro-batch':>11} {'ppo.py s':>9} {'ppo_ewma.py s':>13} {'time ratio':>10}")
    for micro in args.micro_sweep:
        updates = {"ppo": make_update(ppo, micro), "ppo_ewma": make_update(ppo_ewma, micro)}
        times = {name: [] for name in updates}
        for fn in updates.values():
            fn()  # warm-up
        for _ in range(args.repeats):
            for name, fn in updates.items():
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
        a, b = statistics.median(times["ppo"]), statistics.median(times["ppo_ewma"])
        print(f"{micro:>11} {a:9.2f} {b:13.2f} {b / a:10.3f}", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scripts", nargs="+", default=list(SCRIPTS), choices=SCRIPTS, help="default: all four")
    p.add_argument("--options", nargs="+", default=[""],
                   help="option sets to compare, e.g. '' ' --bf16' (start each with a space)")
    p.add_argument("--env-id", default="starpilot", choices=PROCGEN_GAMES, metavar="GAME", help="default: starpilot")
    p.add_argument("--num-envs", type=COUNT, default=64, help="default: 64, the scripts' default")
    p.add_argument("--num-steps", type=COUNT, default=256, help="default: 256, the scripts' default")
    p.add_argument("--iterations", type=COUNT, default=2, help="measured iterations per run (default: 2)")
    p.add_argument("--warmup", type=NATURAL, default=1, help="iterations skipped at the start of each run (default: 1)")
    p.add_argument("--repeats", type=COUNT, default=1, help="runs per script, in alternating order; medians over all")
    p.add_argument("--extra", default="",
                   help="more arguments for every run, e.g. --extra=--no-cuda or --extra ' --bf16 --compile'")
    p.add_argument("--cleanrl", metavar="COMMAND", help="also run CleanRL's ppo_procgen.py, e.g. \"python3 "
                                                      "/path/ppo_procgen.py\" (with gym 0.23.1 and tyro there)")
    p.add_argument("--pieces", action="store_true", help="time the pieces instead of whole runs")
    p.add_argument("--no-cuda", action="store_true",
                   help="with --pieces: stay on the CPU (whole runs: --extra=--no-cuda)")
    p.add_argument("--micro-sweep", nargs="+", type=NATURAL, metavar="M",
                   help="time the update at these micro-batch sizes (0: the whole minibatch)")
    if sys.argv[1:2] == ["--child"]:
        return child_main(sys.argv[2], sys.argv[3:])
    args = p.parse_args()
    if args.warmup < 1 and not (args.pieces or args.micro_sweep):
        p.error("--warmup must be at least 1: the first iteration counts the FLOPs (the counter slows it)")
    micro_sweep_mode(args) if args.micro_sweep else pieces_mode(args) if args.pieces else runs_mode(args)


if __name__ == "__main__":
    main()
