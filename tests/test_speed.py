"""Speed options change the speed, never the maths or the recorded hyperparameters."""
import argparse
import copy
import functools
import json
import math
import os

import pytest
import torch

from conftest import load, run_tiny


def random_batch(module, agent, size, seed=0):
    g = torch.Generator().manual_seed(seed)
    batch = {"obs": torch.randint(0, 256, (size, 64, 64, 3), dtype=torch.uint8, generator=g),
             "actions": torch.randint(0, 15, (size,), generator=g), "advantages": torch.randn(size, generator=g),
             "returns": torch.randn(size, generator=g), "values": torch.randn(size, generator=g),
             "adv_mean": torch.tensor(0.0), "adv_std": torch.tensor(1.0)}
    with torch.no_grad():
        batch["logp_behav"] = module.log_prob(agent.logits(batch["obs"]), batch["actions"])
    batch["logp_old"] = batch["logp_behav"]
    return batch


@functools.cache  # the two micro-batch tests compare the same two updates: each runs once
def one_update(module, micro, epochs, minibatches):
    """The script's update on a fixed random batch of 128 from fixed initial weights; returns (gradients left
    on the parameters by the last minibatch, parameters after the update)."""
    argv = ["--num-envs", "4", "--num-steps", "32", "--num-minibatches", str(minibatches), "--no-cuda"]
    epochs_flag = "--e-pi" if hasattr(module, "aux_phase") else "--update-epochs"
    args = module.parse_args(argv + [epochs_flag, str(epochs)])
    args.micro_batch_size = micro
    torch.manual_seed(0)
    agent = module.Agent(15)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate)
    batch = random_batch(module, agent, 128)
    extra = (module.EWMA(getattr(agent, "policy", agent), args.beta_prox),) if hasattr(module, "EWMA") else ()
    torch.manual_seed(1)
    module.update(agent, optimizer, batch, args, *extra)
    return {n: p.grad.clone() for n, p in agent.named_parameters() if p.grad is not None}, agent.state_dict()


def test_micro_batches_give_the_same_gradient_as_one_pass(script):
    """One minibatch of 128 as 8 accumulated micro-batches of 16: the same gradient to float32 rounding, each
    parameter's within 1e-6 of the whole gradient's norm (measured: ~2e-7). Not of its own norm: where per-sample
    terms nearly cancel (the value head's bias, clipped by --clip-vloss here) rounding moves it by ~1e-5 of itself."""
    (g_one, _), (g_micro, _) = one_update(script, 0, 1, 1), one_update(script, 16, 1, 1)
    assert g_one.keys() == g_micro.keys() and g_one
    scale = float(torch.cat([g.flatten() for g in g_one.values()]).norm())
    for name, g in g_one.items():
        assert float((g - g_micro[name]).norm()) <= 1e-6 * scale, name


def test_micro_batches_give_the_same_parameters_after_an_optimiser_step(script):
    """One Adam step on a minibatch of 128, one pass vs micro-batches of 16. Adam's first step is
    lr * g / (|g| + eps): where g is near eps, a rounding difference of g moves the step by up to lr, so the check
    is on the coordinates whose gradient stands above rounding (1e-6 of the gradient's norm, the test above; the
    clip makes that norm 0.5): there every parameter agrees to 1e-6 (measured: 2e-8). One step a micro-batch, or
    a step that misses a micro-batch's gradient, moves them by ~lr = 5e-4."""
    (g_one, p_one), (_, p_micro) = one_update(script, 0, 1, 1), one_update(script, 16, 1, 1)
    scale = float(torch.cat([g.flatten() for g in g_one.values()]).norm())
    for k, g in g_one.items():
        above_rounding = g.abs() > 1e-6 * scale
        assert float(((p_one[k] - p_micro[k]).abs() * above_rounding).max()) < 1e-6, k
    torch.manual_seed(0)
    initial = script.Agent(15).state_dict()  # one_update's agent before its step
    assert any(not torch.equal(p_one[k], initial[k]) for k in p_one)


def test_speed_options_run_and_leave_the_hyperparameters_alone(tmp_path, device):
    """--bf16 and --micro-batch-size change only their own keys in config.json."""
    base, _ = run_tiny("ppo_ewma", tmp_path / "base", iterations=1, device=device)
    fast, rows = run_tiny("ppo_ewma", tmp_path / "fast", "--bf16", "--micro-batch-size", "16", iterations=1,
                          device=device)
    a, b = (json.load(open(os.path.join(d, "config.json"))) for d in (base, fast))
    assert {k for k in a if a[k] != b[k]} == {"bf16", "micro_batch_size", "runs_dir"}
    assert math.isfinite(float(rows[0]["policy_loss"]))


def test_bf16_autocast_stays_inside_the_cnn():
    ppo = load("ppo")
    torch.manual_seed(0)  # the same weights and frames whichever tests ran before
    agent = ppo.Agent(15)
    ppo.prepare_networks({"agent": agent}, argparse.Namespace(bf16=True, compile=False))
    obs = torch.randint(0, 256, (2, 64, 64, 3), dtype=torch.uint8)
    logits, value = agent(obs)
    assert logits.dtype == torch.float32 and value.dtype == torch.float32
    agent32 = copy.deepcopy(agent)
    ppo.prepare_networks({"agent": agent32}, argparse.Namespace(bf16=False, compile=False))
    assert not torch.equal(agent32(obs)[0], logits)  # bf16 really ran
    torch.testing.assert_close(agent32(obs)[0], logits, rtol=0.05, atol=0.02)


def test_compile_runs_and_keeps_parameter_names(tmp_path, device, monkeypatch):
    """--compile compiles one graph per batch size and grad mode (the rollout's, the minibatch's with gradients, ...);
    the checkpoint keeps the plain parameter names, so a compiled run resumes or evaluates without --compile. On the
    CPU the graphs are traced as --compile traces them but run eagerly: inductor's code generation is torch's to test,
    and takes 40 s on a 2-core CPU whose compile cache is cold (a fresh clone's first suite)."""
    import torch._dynamo.utils
    if device.type == "cpu":
        monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="eager"))
    torch._dynamo.reset()  # a graph compiled earlier in this session, reused, would not count
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    run_dir, rows = run_tiny("ppo", tmp_path, "--compile", "--save-model", iterations=1, device=device)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] - graphs >= 2
    state = torch.load(os.path.join(run_dir, "checkpoint.pt"), weights_only=True)
    assert set(state["agent"]) == set(load("ppo").Agent(15).state_dict())
    assert rows[0]["policy_loss"] != ""


def test_the_rollout_forward_is_one_cuda_graph_on_a_gpu_and_the_same_maths(script, device, monkeypatch):
    """On CUDA, collect_rollout replays the agent's forward as one captured graph (cuda_graph), captured once a
    network: each step's stored values and behaviour log-probs are the eager forward's on its frames (to TF32's
    rounding), after an optimiser step too, as the graph reads the weights where the step left them. On the CPU
    the rollout never captures one."""
    if device.type == "cpu":
        monkeypatch.setattr(script, "cuda_graph", lambda *a: pytest.fail("a CUDA graph on the CPU"))
    torch.manual_seed(0)
    agent = script.Agent(15).to(device)
    envs = script.ProcgenVecEnv("starpilot", 4, "easy", 0, 0, 1)
    optimizer = torch.optim.Adam(agent.parameters(), lr=1e-3)
    for _ in range(2):  # before and after an in-place step of every weight
        rollout, _ = script.collect_rollout(envs, agent, 8, device)
        for t in range(8):  # the eager forward on each step's frames, a batch of the graph's shape
            with torch.no_grad():
                logits, values = agent(rollout["obs"][t])
            logp = script.log_prob(logits, rollout["actions"][t])
            torch.testing.assert_close(values, rollout["values"][t], rtol=1e-3, atol=1e-3)
            torch.testing.assert_close(logp, rollout["logp_behav"][t], rtol=1e-3, atol=1e-3)
        optimizer.zero_grad()
        agent(rollout["obs"][0])[0].logsumexp(-1).sum().backward()  # any loss: every weight of the policy moves
        optimizer.step()
    if device.type == "cuda":
        assert script.cuda_graph.cache_info().currsize >= 1
