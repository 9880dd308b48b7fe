"""Many workers (CPU, gloo, 2 processes): statistics over all workers' data, and resume with the workers a run had.
A whole 2-worker run under torchrun: test_checkpoint.py's two-worker resume."""
import argparse
import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from conftest import BATCH, ROOT, load


DECAYS = (0.0, 0.5)  # of the advantage moments


def advantage_data(rank, batch):
    return torch.arange(5 + 3 * rank + batch, dtype=torch.float32) * (rank + 1) + batch


def reward_data(rank, rollout):
    """Worker 1's rewards are 100 times worker 0's: a per-worker std would differ by 100x."""
    g = torch.Generator().manual_seed(10 * rank + rollout)
    return torch.randn(8, 3, generator=g) * (1 if rank == 0 else 100), torch.rand(8, 3, generator=g) < 0.2


def _worker(rank, result_dir):
    """Both workers' statistics, in one spawn: AdvantageMoments at decays 0 and 0.5 over 3 batches, RewardNormalizer
    over 2 rollouts of 8 steps x 3 envs; each worker's results go to rank{rank}.pt. The workers meet in a file of
    the test's folder, not on a port another process may hold."""
    store = f"file://{os.path.join(result_dir, 'store')}"
    dist.init_process_group("gloo", init_method=store, rank=rank, world_size=2)
    ppo, out = load("ppo"), {}
    for decay in DECAYS:
        moments = ppo.AdvantageMoments(decay)
        out[decay] = [[float(v) for v in moments(advantage_data(rank, batch))] for batch in range(3)]
    norm = ppo.RewardNormalizer(3)
    out["rewards"] = [norm(*reward_data(rank, rollout)) for rollout in range(2)]
    out["var"], out["mean"] = norm.var, norm.mean
    # prepare_networks with each worker's own initialisation and its own envs' discounted returns (worker 1's rewards
    # are not worker 0's), as a new run or a resume hands them over
    torch.manual_seed(rank)
    agent, ret = ppo.Agent(ppo.NUM_ACTIONS), norm.ret.clone()
    ppo.prepare_networks(dict(agent=agent, reward_normalizer=norm), argparse.Namespace(bf16=False, compile=False))
    out["weights"], out["ret"], out["ret_before"] = [p.detach().clone() for p in agent.parameters()], norm.ret, ret
    torch.save(out, os.path.join(result_dir, f"rank{rank}.pt"))
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def pooled(tmp_path_factory):
    """[rank 0's results, rank 1's]: two gloo workers on the CPU (torch.multiprocessing), started once for the file."""
    folder = tmp_path_factory.mktemp("workers")
    mp.spawn(_worker, args=(str(folder),), nprocs=2)
    return [torch.load(os.path.join(folder, f"rank{r}.pt")) for r in range(2)]


@pytest.mark.parametrize("decay", DECAYS)
def test_advantage_statistics_are_those_of_all_workers_data(decay, pooled):
    results = [pooled[r][decay] for r in range(2)]
    assert results[0] == results[1]
    reference = load("ppo").AdvantageMoments(decay)  # one worker, both workers' data concatenated
    for batch in range(3):
        both = torch.cat([advantage_data(r, batch) for r in range(2)])
        expected = [float(v) for v in reference(both)]
        assert results[0][batch] == pytest.approx(expected, rel=1e-6)


def test_reward_statistics_are_pooled_over_workers(pooled):
    assert torch.equal(pooled[0]["var"], pooled[1]["var"]) and torch.equal(pooled[0]["mean"], pooled[1]["mean"])
    # by hand: every discounted return of both workers so far, one running-moments estimate, one std for both
    returns, rets = [], [torch.zeros(3), torch.zeros(3)]
    for rollout in range(2):
        for rank in range(2):
            rewards, firsts = reward_data(rank, rollout)
            for t in range(8):
                rets[rank] = rewards[t] + 0.99 * rets[rank] * (~firsts[t])
                returns.append(rets[rank].double())
        x = torch.cat(returns)
        count = 1e-4 + x.numel()
        var = (1e-4 + ((x - x.mean()) ** 2).sum() + x.mean() ** 2 * 1e-4 * x.numel() / count) / count
        for rank in range(2):
            rewards, _ = reward_data(rank, rollout)
            expected = torch.clamp(rewards / torch.sqrt(var + 1e-8).float(), -10, 10)
            torch.testing.assert_close(pooled[rank]["rewards"][rollout], expected, rtol=1e-5, atol=1e-6)
    assert float(pooled[0]["var"]) == pytest.approx(float(var), rel=1e-9)


def test_resume_with_another_number_of_workers_is_refused(finished_ppo, monkeypatch, bad_argument):
    """Another number of workers would change the run's batch and its per-worker state: refused, with the command
    that resumes the run as it was started."""
    run_dir = finished_ppo
    monkeypatch.setenv("WORLD_SIZE", "2")
    err = bad_argument("ppo", ["--resume", run_dir, "--total-timesteps", str(2 * BATCH)], "--resume")
    assert f"the run has 1 workers: resume it with python {os.path.join(ROOT, 'ppo.py')} --resume" in err


def test_the_resume_command_of_a_multi_worker_run_is_torchrun():
    ppo = load("ppo")
    # with time to finish an iteration and save on Ctrl-C (torchrun's own 30 s is less than one on a CPU)
    assert ppo.resume_command("runs/x", 2) == (f"torchrun --shutdown-timeout 600 --nproc-per-node 2 "
                                               f"{os.path.join(ROOT, 'ppo.py')} --resume {os.path.abspath('runs/x')}")


def test_every_worker_starts_from_rank_0s_weights_and_keeps_its_own_envs_returns(pooled):
    """prepare_networks: rank 0's initial weights reach every worker; the reward normaliser's per-env returns, which a
    resume puts back from each worker's own checkpoint, stay each worker's (rank 0's would replace the other's)."""
    torch.manual_seed(0)
    rank0 = [p.detach() for p in load("ppo").Agent(load("ppo").NUM_ACTIONS).parameters()]
    for rank in range(2):
        assert all(torch.equal(a, b) for a, b in zip(pooled[rank]["weights"], rank0))
        assert torch.equal(pooled[rank]["ret"], pooled[rank]["ret_before"])
    assert not torch.equal(pooled[0]["ret"], pooled[1]["ret"])  # the two workers' returns differ to begin with
