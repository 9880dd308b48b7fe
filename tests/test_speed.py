"""Speed options change the speed, never the maths or the recorded hyperparameters."""
import copy
import json
import os

import torch

from conftest import load, run_tiny


def random_batch(module, agent, size, seed=0):
    g = torch.Generator().manual_seed(seed)
    batch = {"obs": torch.randint(0, 256, (size, 64, 64, 3), dtype=torch.uint8, generator=g),
             "actions": torch.randint(0, 15, (size,), generator=g), "advantages": torch.randn(size, generator=g),
             "returns": torch.randn(size, generator=g)}
    with torch.no_grad():
        batch["logp_behav"] = module.log_prob(agent.logits(batch["obs"]), batch["actions"])
    batch["logp_old"] = batch["logp_behav"]
    return batch


def test_micro_batches_give_the_same_update_as_one_pass(script):
    """Gradient accumulation over micro-batches of 16 vs one pass over each minibatch of 64: after a whole
    update (4 Adam steps) the parameters agree to float32 rounding (rtol 1e-4 after Adam's normalisation)."""
    module = script
    args = module.parse_args(["--num-envs", "4", "--num-steps", "32", "--num-minibatches", "2", "--no-cuda"])
    extra_ewma = hasattr(module, "EWMA")
    results = []
    for micro in (0, 16):
        torch.manual_seed(0)
        agent = module.Agent(15)
        args.micro_batch_size = micro
        optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate)
        batch = random_batch(module, agent, 128)
        net = getattr(agent, "policy", agent)
        extra = (module.EWMA(net, args.beta_prox),) if extra_ewma else ()
        torch.manual_seed(1)
        module.update(agent, optimizer, batch, args, *extra)
        results.append(copy.deepcopy(agent.state_dict()))
    for name in results[0]:
        torch.testing.assert_close(results[0][name], results[1][name], rtol=1e-4, atol=1e-6, msg=name)
    changed = any(not torch.equal(results[0][k], module.Agent(15).state_dict()[k]) for k in results[0])
    assert changed


def test_speed_options_run_and_leave_the_hyperparameters_alone(tmp_path):
    """--bf16 and --micro-batch-size change only their own keys in config.json."""
    base, _ = run_tiny("ppo_ewma", tmp_path / "base", iterations=1)
    fast, rows = run_tiny("ppo_ewma", tmp_path / "fast", "--bf16", "--micro-batch-size", "32", iterations=1)
    a, b = (json.load(open(os.path.join(d, "config.json"))) for d in (base, fast))
    assert {k for k in a if a[k] != b[k]} == {"bf16", "micro_batch_size"}
    assert float(rows[0]["policy_loss"]) == float(rows[0]["policy_loss"])  # finite, not NaN


def test_bf16_autocast_stays_inside_the_cnn():
    ppo = load("ppo")
    agent = ppo.Agent(15)
    ppo.configure_cnns([agent], bf16=True, compile=False)
    obs = torch.randint(0, 256, (2, 64, 64, 3), dtype=torch.uint8)
    logits, value = agent(obs)
    assert logits.dtype == torch.float32 and value.dtype == torch.float32
    agent32 = copy.deepcopy(agent)
    ppo.configure_cnns([agent32], bf16=False, compile=False)
    assert not torch.equal(agent32(obs)[0], logits)  # bf16 really ran
    torch.testing.assert_close(agent32(obs)[0], logits, rtol=0.05, atol=0.02)


def test_compile_runs_and_keeps_parameter_names(tmp_path):
    run_dir, rows = run_tiny("ppo", tmp_path, "--compile", "--save-model", iterations=1)
    state = torch.load(os.path.join(run_dir, "checkpoint.pt"), weights_only=True)
    assert set(state["agent"]) == set(load("ppo").Agent(15).state_dict())
    assert rows[0]["policy_loss"] != ""
