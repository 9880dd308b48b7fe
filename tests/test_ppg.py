"""PPG-specific behaviour of ppg.py and ppg_ewma.py: the aux buffer, the aux phase, the phase schedule,
PPG-EWMA's reset of the proximal network at the start of every policy phase (PPG's argument checks: test_cli.py)."""
import copy
import math
import os
import signal

import pytest
import torch

from conftest import (BATCH, LEARNING_COLUMNS, RecordingSGD, StatelessEnv, assert_same_state, load,
                      read_progress, run_dirs, run_tiny, tiny_argv, update_extra)
from test_objectives import one_step_case

NUM_ACTIONS = 15
AUX_COLUMNS = ("aux_kl", "aux_value_loss", "aux_true_value_loss", "aux_time_s")


# --- helpers local to this file ----------------------------------------------------------------------------
def labelled_phase(num_steps, num_envs, first_traj=0, seed=0):
    """Fake time-major data (T, N, ...) whose every frame carries its trajectory id in pixel (0, 0, 0) and its
    time index in pixel (0, 0, 1); the rest is random. Returns (obs_tn, returns_tn) and the make_batch-style
    flattening {"obs": (T*N, 64, 64, 3), "returns": (T*N,)}."""
    g = torch.Generator().manual_seed(seed)
    obs = torch.randint(0, 256, (num_steps, num_envs, 64, 64, 3), dtype=torch.uint8, generator=g)
    obs[:, :, 0, 0, 0] = (first_traj + torch.arange(num_envs, dtype=torch.uint8)).view(1, num_envs)
    obs[:, :, 0, 0, 1] = torch.arange(num_steps, dtype=torch.uint8).view(num_steps, 1)
    returns = torch.randn((num_steps, num_envs), generator=g)
    return obs, returns, {"obs": obs.flatten(0, 1), "returns": returns.flatten()}


def aux_setup(module, num_steps=8, num_envs=4, n_pi=2, seed=0, **overrides):
    """A small aux phase: args from the script's own parse_args, an Agent and a full AuxBuffer of
    n_pi * num_envs labelled trajectories (trajectory id = row index in the buffer)."""
    args = module.parse_args(tiny_argv(module.__name__))
    args.num_steps = num_steps
    for k, v in overrides.items():
        setattr(args, k, v)
    torch.manual_seed(seed)
    agent = module.Agent(NUM_ACTIONS)
    buffer = module.AuxBuffer(n_pi, num_envs, num_steps, torch.device("cpu"))
    for i in range(n_pi):
        buffer.add(labelled_phase(num_steps, num_envs, first_traj=i * num_envs, seed=seed + 1 + i)[2], num_steps)
    return args, agent, buffer


class StepMarkingAdam(torch.optim.Adam):
    """Adam that appends a marker to `log` at every step, so forwards can be grouped into minibatches."""
    def __init__(self, params, log, **kw):
        super().__init__(params, **kw)
        self.log = log

    def step(self, closure=None):
        self.log.append("step")
        return super().step(closure)


def params_equal(a, b):
    return all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))


# --- AuxBuffer ---------------------------------------------------------------------------------------------
def test_aux_buffer_add_stores_whole_per_env_trajectories_in_time_order(ppg_script):
    T, N = 5, 3
    buffer = ppg_script.AuxBuffer(2, N, T, torch.device("cpu"))
    assert buffer.size == 0
    obs0, ret0, batch0 = labelled_phase(T, N, seed=1)
    buffer.add(batch0, T)
    assert buffer.size == N
    for i in range(N):
        assert torch.equal(buffer.obs[i], obs0[:, i])  # env i's T frames, time order
        assert torch.equal(buffer.returns[i], ret0[:, i])
    obs1, ret1, batch1 = labelled_phase(T, N, first_traj=N, seed=2)
    buffer.add(batch1, T)
    assert buffer.size == 2 * N
    for i in range(N):
        assert torch.equal(buffer.obs[N + i], obs1[:, i])
        assert torch.equal(buffer.returns[N + i], ret1[:, i])
        assert torch.equal(buffer.obs[i], obs0[:, i])  # the first add is untouched
        assert torch.equal(buffer.returns[i], ret0[:, i])
    assert buffer.obs.dtype == torch.uint8  # stored as uint8: float32 would not fit in RAM at the defaults


def test_a_ppg_run_saves_right_after_its_aux_phases_only_and_ends_with_one(tmp_path, monkeypatch):
    """Periodic checkpoints come when the aux buffer is empty, so they hold no frames (~6.4 GB at the defaults just
    before an aux phase): with N_pi = 2 and 3 iterations' worth of steps, the run is rounded up to 4 iterations (2
    whole phases) and saves after iterations 2 and 4, never mid-phase, even with --save-interval 1 (one phase).
    main()'s lines that say so are the same in both PPG scripts."""
    ppg_script = load("ppg_ewma")
    saved, real_save = [], ppg_script.save_checkpoint
    monkeypatch.setattr(ppg_script, "save_checkpoint", lambda run_dir, learner, fifo, i, time_s: (
        saved.append(i), real_save(run_dir, learner, fifo, i, time_s)))
    run_dir, rows = run_tiny(ppg_script.__name__, tmp_path, "--save-interval", "1", iterations=3)
    assert [r["iteration"] for r in rows] == ["1", "2", "3", "4"] and saved == [2, 4]
    for r in rows:  # aux columns on the rows that end a phase, empty on the others
        assert math.isfinite(float(r["policy_loss"])) and math.isfinite(float(r["value_loss"]))
        for c in AUX_COLUMNS:
            assert (r[c] != "" and math.isfinite(float(r[c]))) if r["iteration"] in ("2", "4") else r[c] == "", (r, c)
    state = torch.load(os.path.join(run_dir, "checkpoint.pt"), weights_only=True)
    assert state["iteration"] == 4 and state["aux_buffer"]["size"] == 0 and state["aux_buffer"]["obs"].numel() == 0


def test_a_stop_mid_phase_keeps_the_phase_and_the_resume_goes_on_as_if_never_stopped(tmp_path, monkeypatch, capsys):
    """N_pi = 3, 6 iterations, the stand-in environment: SIGTERM after iteration 2 (the first phase: no checkpoint
    yet) and, after a resume, after iteration 4 (mid second phase). Each stop saves the phase's trajectories so far
    with the checkpoint; each aux phase then sees all 12 of its phase's trajectories, and every row and the final
    checkpoint equal those of a run that never stopped. On ppg.py: ppg_ewma.py stops mid-phase in test_checkpoint.py's
    SIGTERM test."""
    ppg_script = load("ppg")
    monkeypatch.setattr(ppg_script, "ProcgenVecEnv", StatelessEnv)
    name, sizes, real_log, real_aux_phase = ppg_script.__name__, [], ppg_script.log_iteration, ppg_script.aux_phase
    argv = lambda folder: tiny_argv(name, "--runs-dir", str(tmp_path / folder), "--n-pi", "3",  # noqa: E731
                                    "--total-timesteps", str(6 * BATCH))
    monkeypatch.setattr(ppg_script, "aux_phase", lambda agent, opt, buffer, *rest: (
        sizes.append(buffer.size), real_aux_phase(agent, opt, buffer, *rest))[1])
    full = ppg_script.main(argv("full"))
    assert sizes == [12, 12]

    def stop_after(iteration):  # a SIGTERM as from `kill`, right after the row of `iteration` is written
        def log(run_dir, args, device, i, *rest):
            row = real_log(run_dir, args, device, i, *rest)
            if i == iteration:
                os.kill(os.getpid(), signal.SIGTERM)
            return row
        monkeypatch.setattr(ppg_script, "log_iteration", log)

    sizes.clear()
    stop_after(2)
    with pytest.raises(SystemExit) as stop:
        ppg_script.main(argv("part"))
    part = run_dirs(tmp_path / "part")[0]
    state = torch.load(os.path.join(part, "checkpoint.pt"), weights_only=True)
    assert stop.value.code == 128 + signal.SIGTERM and state["iteration"] == 2 and sizes == []
    assert state["aux_buffer"]["size"] == 8 and state["aux_buffer"]["obs"].shape == (8, 4, 64, 64, 3)
    assert "Stopped (SIGTERM), checkpoint of iteration 2: resume with" in capsys.readouterr().out
    stop_after(4)
    with pytest.raises(SystemExit):
        ppg_script.main(["--resume", part])
    assert torch.load(os.path.join(part, "checkpoint.pt"), weights_only=True)["aux_buffer"]["size"] == 4
    stop_after(None)
    assert ppg_script.main(["--resume", part]) == part
    assert sizes == [12, 12] and "aux epoch 1/1 over 12 trajectories" in capsys.readouterr().out
    rows_full, rows_part = read_progress(full), read_progress(part)
    assert [r["iteration"] for r in rows_part] == [str(i) for i in range(1, 7)]
    columns = LEARNING_COLUMNS + ["aux_kl", "aux_value_loss", "aux_true_value_loss"]
    assert [{c: r[c] for c in columns} for r in rows_full] == [{c: r[c] for c in columns} for r in rows_part]
    a, b = (torch.load(os.path.join(d, "checkpoint.pt"), weights_only=True) for d in (full, part))
    a.pop("time_s"), b.pop("time_s")
    assert_same_state(a, b)


# --- aux phase ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("micro", [0, 12])
def test_aux_minibatches_are_whole_trajectories_each_visited_once_per_epoch(ppg_script, micro):
    T, N, n_pi, mb_trajs, e_aux = 8, 4, 2, 2, 2
    args, agent, buffer = aux_setup(ppg_script, T, N, n_pi, e_aux=e_aux, aux_minibatch_trajs=mb_trajs,
                                    micro_batch_size=micro)
    log = []
    real_forward = agent.policy.forward

    def recording_forward(obs):
        log.append(obs.detach().clone())
        return real_forward(obs)

    agent.policy.forward = recording_forward  # only the aux training forwards go through policy.__call__
    optimizer = StepMarkingAdam(agent.parameters(), log, lr=args.aux_learning_rate, eps=1e-8)
    ppg_script.aux_phase(agent, optimizer, buffer, args)

    # group the forwards between optimiser steps: one group = one minibatch
    minibatches, current = [], []
    for entry in log:
        if isinstance(entry, str):
            minibatches.append(torch.cat(current))
            current = []
        else:
            if micro == 0:
                assert entry.shape[0] % T == 0, "a forward saw part of a trajectory with micro-batching off"
            current.append(entry)
    assert not current, "forwards after the last optimiser step"
    n = n_pi * N
    per_epoch = math.ceil(n / mb_trajs)
    assert len(minibatches) == e_aux * per_epoch
    for epoch in range(e_aux):
        seen = []
        for mb in minibatches[epoch * per_epoch:(epoch + 1) * per_epoch]:
            assert mb.shape[0] % T == 0 and mb.shape[0] // T <= mb_trajs
            ids = mb[:, 0, 0, 0].view(-1, T).long()
            times = mb[:, 0, 0, 1].view(-1, T).long()
            assert (ids == ids[:, :1]).all(), "a minibatch row mixes trajectories"
            assert (times == torch.arange(T)).all(), "a trajectory's frames are out of time order"
            for k, traj in enumerate(ids[:, 0].tolist()):
                assert torch.equal(mb[k * T:(k + 1) * T], buffer.obs[traj]), "frames differ from the stored trajectory"
            seen += ids[:, 0].tolist()
        assert sorted(seen) == list(range(n)), f"epoch {epoch} did not visit every trajectory exactly once"


def test_aux_phase_with_zero_step_size_has_zero_kl_and_hand_computed_value_losses(ppg_script):
    """With lr=0 nothing moves, so every minibatch sees pi = pi_old: the KL is the one the aux phase measures
    before its first step. The logged value losses are then 0.5 * MSE over the whole buffer (equal minibatches)."""
    T, N, n_pi = 8, 4, 2
    args, agent, buffer = aux_setup(ppg_script, T, N, n_pi, e_aux=2, aux_minibatch_trajs=2, micro_batch_size=0)
    before = [p.detach().clone() for p in agent.parameters()]
    optimizer = torch.optim.Adam(agent.parameters(), lr=0.0, eps=1e-8)
    logged = ppg_script.aux_phase(agent, optimizer, buffer, args)
    assert all(torch.equal(p, q) for p, q in zip(agent.parameters(), before))
    assert buffer.size == 0  # the aux phase took the phase's trajectories: the next phase fills it anew

    assert abs(logged["aux_kl"]) < 1e-6
    obs, returns = buffer.obs[:n_pi * N].flatten(0, 1), buffer.returns[:n_pi * N].flatten()
    with torch.no_grad():
        _, aux_value = agent.policy(obs)
        value = agent.value(obs).squeeze(-1)
    assert logged["aux_value_loss"] == pytest.approx(0.5 * float(((aux_value - returns) ** 2).mean()), rel=1e-5)
    assert logged["aux_true_value_loss"] == pytest.approx(0.5 * float(((value - returns) ** 2).mean()), rel=1e-5)


@pytest.mark.parametrize("micro", [0, 24])
def test_aux_phase_steps_on_the_gradient_of_its_loss_by_hand(ppg_script, micro):
    """Two epochs of one minibatch holding every trajectory, so at the second step pi has moved away from pi_old: the
    gradient is that of 0.5 MSE(aux value) + beta_clone KL[pi_old || pi] + 0.5 MSE(value), with pi_old the policy
    before the phase. A slip in the KL's direction, beta_clone or either value head gives another gradient; so does
    one in accumulating the 64 frames' gradient over micro-batches of 24, 24 and 16."""
    T, N, n_pi = 8, 4, 2
    args, agent, buffer = aux_setup(ppg_script, T, N, n_pi, e_aux=2, aux_minibatch_trajs=n_pi * N,
                                    micro_batch_size=micro, beta_clone=2.5)
    old = copy.deepcopy(agent)
    optimizer = RecordingSGD(agent.parameters(), lr=0.5)
    ppg_script.aux_phase(agent, optimizer, buffer, args)
    assert len(optimizer.grads) == 2
    at_step = copy.deepcopy(agent)
    for p, before in zip(at_step.parameters(), optimizer.before[1]):
        p.data.copy_(before)
    obs, returns = buffer.obs[:n_pi * N].flatten(0, 1), buffer.returns[:n_pi * N].flatten()
    with torch.no_grad():
        p_old = torch.softmax(old.logits(obs), -1)
    logits, aux_value = at_step.policy(obs)
    kl = (p_old * (p_old.log() - torch.log_softmax(logits, -1))).sum(-1).mean()
    assert kl.item() > 1e-4  # the first step moved the policy
    loss = (0.5 * ((aux_value - returns) ** 2).mean() + 2.5 * kl
            + 0.5 * ((at_step.value(obs).squeeze(-1) - returns) ** 2).mean())
    expected = torch.autograd.grad(loss, list(at_step.parameters()))
    for (name, _), got, want in zip(agent.named_parameters(), optimizer.grads[1], expected):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6, msg=name)


def test_value_only_epochs_leave_the_policy_and_its_ewma_alone(ppg_script):
    """--e-v 3 --e-pi 1, 2 minibatches: 6 optimiser steps, the first 2 with the policy's gradient, the last 4 with the
    value network's only: the policy's is None, not zero, which Adam's momentum would still step on. PPG-EWMA's EWMA
    counts the 2 policy steps (w = 1 + beta + beta^2 over theta_0..theta_2)."""
    agent, args, batch = one_step_case(ppg_script)
    args.e_v, args.num_minibatches = 3, 2
    extra = update_extra(ppg_script, agent)
    optimizer = RecordingSGD(agent.parameters())
    policy_names = {n for n, _ in agent.named_parameters() if n.startswith("policy.")}
    ppg_script.update(agent, optimizer, batch, args, *extra)
    assert len(optimizer.grads) == 6
    for k, grads in enumerate(optimizer.grads):
        got_grad = {n for (n, _), g in zip(agent.named_parameters(), grads) if g is not None and g.any()}
        has_grad = {n for (n, _), g in zip(agent.named_parameters(), grads) if g is not None}
        assert got_grad & policy_names if k < 2 else not has_grad & policy_names, k
        assert got_grad - policy_names, k  # the value network trains in every epoch
    if extra:
        ewma, beta = extra[0], args.beta_prox
        assert ewma.w == pytest.approx(1 + beta + beta ** 2)
        names = [n for n, _ in agent.named_parameters()]
        thetas = [[dict(zip(names, before))[f"policy.{n}"] for n, _ in agent.policy.named_parameters()]
                  for before in optimizer.before[:2]] + [[p.detach() for p in agent.policy.parameters()]]
        for i, prox in enumerate(ewma.net.parameters()):
            expected = (beta ** 2 * thetas[0][i] + beta * thetas[1][i] + thetas[2][i]) / (1 + beta + beta ** 2)
            torch.testing.assert_close(prox, expected, rtol=1e-5, atol=1e-7)


def test_aux_phase_losses_are_finite_and_kl_grows_after_the_first_step(ppg_script):
    """Several minibatches with a real step size: every logged loss is finite, the KL to pi_old is positive once
    the policy has moved, and both networks are trained."""
    T, N, n_pi = 8, 4, 2
    args, agent, buffer = aux_setup(ppg_script, T, N, n_pi, e_aux=2, aux_minibatch_trajs=2, micro_batch_size=0)
    policy_before = [p.detach().clone() for p in agent.policy.parameters()]
    value_before = [p.detach().clone() for p in agent.value.parameters()]
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.aux_learning_rate, eps=1e-8)
    logged = ppg_script.aux_phase(agent, optimizer, buffer, args)
    assert set(logged) == {"aux_kl", "aux_value_loss", "aux_true_value_loss", "aux_time_s"}
    assert all(math.isfinite(v) for v in logged.values())
    assert logged["aux_kl"] > 0  # KL >= 0, and > 0 once the policy has moved
    assert logged["aux_value_loss"] > 0 and logged["aux_true_value_loss"] > 0
    assert not all(torch.equal(p, q) for p, q in zip(agent.policy.parameters(), policy_before))
    assert not all(torch.equal(p, q) for p, q in zip(agent.value.parameters(), value_before))


def test_the_runs_aux_phase_moves_the_policy_network_and_fits_both_value_heads(ppg_script, tmp_path, monkeypatch):
    """Through main(), with the aux optimiser main() builds: over the phase's buffer, after its aux phase the KL to
    pi_old (the policy just before it) is above 0 and finite, and the losses of the aux value head and of the value
    network have fallen. A phase that never runs, or trains at step size 0, or with an optimiser that holds other
    parameters, or not the value network's, fails here."""
    seen, real_aux_phase = [], ppg_script.aux_phase

    def measured(agent, aux_optimizer, aux_buffer, args, *rest):
        obs, returns = aux_buffer.obs[:aux_buffer.size].flatten(0, 1), aux_buffer.returns[:aux_buffer.size].flatten()
        with torch.no_grad():
            logits, aux_v = agent.policy(obs)
            logp_old, v = torch.log_softmax(logits, -1), agent.value(obs).squeeze(-1)
        out = real_aux_phase(agent, aux_optimizer, aux_buffer, args, *rest)
        with torch.no_grad():
            logits, aux_v_after = agent.policy(obs)
            kl = (logp_old.exp() * (logp_old - torch.log_softmax(logits, -1))).sum(-1).mean()
            v_after = agent.value(obs).squeeze(-1)
        seen.append((float(kl), *[float((x - returns).pow(2).mean()) for x in (aux_v, aux_v_after, v, v_after)]))
        return out
    monkeypatch.setattr(ppg_script, "aux_phase", measured)
    run_tiny(ppg_script.__name__, tmp_path, "--e-aux", "4", iterations=2)
    (kl, aux_before, aux_after, before, after), = seen
    assert 0 < kl < math.inf and aux_after < aux_before and after < before, seen


def test_aux_phase_keeps_its_minibatch_and_step_size_under_batch_divisor(ppg_script):
    """App. B: the aux phase keeps its minibatch size per worker (N/16 trajectories at the default N) and its
    step size when the envs are divided; N_pi x C keeps 16 N_pi minibatches of the default per epoch."""
    default = ppg_script.parse_args([])
    divided = ppg_script.parse_args(["--batch-divisor", "4"])
    assert default.aux_minibatch_trajs == default.num_envs // 16
    assert divided.aux_minibatch_trajs == default.aux_minibatch_trajs
    assert divided.aux_learning_rate == default.aux_learning_rate == default.learning_rate
    per_epoch = lambda a: math.ceil(a.n_pi * a.num_envs / a.aux_minibatch_trajs)  # noqa: E731
    assert per_epoch(default) == 16 * default.n_pi
    assert per_epoch(divided) == per_epoch(default)


# --- PPG-EWMA: the EWMA is reset at the start of every policy phase, untouched by the aux phase ------------------
def test_ppg_ewma_resets_ewma_after_each_aux_phase_and_never_updates_it_during_one(tmp_path, monkeypatch):
    m = load("ppg_ewma")
    events, ewmas = [], []
    real_reset, real_aux_phase, real_update = m.EWMA.reset, m.aux_phase, m.update

    def reset(self, net):
        real_reset(self, net)
        if not ewmas:
            ewmas.append(self)
        events.append(("reset", self, net, self.w, params_equal(self.net, net)))

    def aux_phase(agent, aux_optimizer, aux_buffer, args, *rest):
        ewma = ewmas[0]
        prox_before = [p.clone() for p in ewma.net.parameters()]
        policy_before = [p.detach().clone() for p in agent.policy.parameters()]
        w_before = ewma.w
        out = real_aux_phase(agent, aux_optimizer, aux_buffer, args, *rest)
        events.append(("aux", agent.policy, ewma.w == w_before,
                       all(torch.equal(p, q) for p, q in zip(ewma.net.parameters(), prox_before)),
                       not all(torch.equal(p, q) for p, q in zip(agent.policy.parameters(), policy_before))))
        return out

    def update(agent, optimizer, batch, args, ewma):
        events.append(("update", ewma, ewma.w, params_equal(ewma.net, agent.policy), args.beta_prox))
        return real_update(agent, optimizer, batch, args, ewma)

    monkeypatch.setattr(m.EWMA, "reset", reset)
    monkeypatch.setattr(m, "aux_phase", aux_phase)
    monkeypatch.setattr(m, "update", update)
    run_tiny("ppg_ewma", tmp_path, iterations=4)

    assert [e[0] for e in events] == ["reset", "update", "update", "aux", "reset", "update", "update", "aux", "reset"]
    ewma = ewmas[0]
    for i, e in enumerate(events):
        if e[0] == "aux":
            _, policy, w_unchanged, prox_unchanged, policy_moved = e
            assert policy_moved, "the aux phase did not train the policy network: the check below is vacuous"
            assert w_unchanged and prox_unchanged, "the EWMA changed during the aux phase"
            _, reset_ewma, net, w, equal = events[i + 1]
            assert reset_ewma is ewma and net is policy, "the reset is not of the EWMA to the policy network"
            assert w == 1.0 and equal, "after the reset the EWMA is not theta with w = 1"
        if e[0] == "update":
            _, update_ewma, w, equal, beta = e
            assert update_ewma is ewma
            if events[i - 1][0] == "reset":  # the first policy-phase iteration: theta_prox = theta, w = 1
                assert w == 1.0 and equal
            else:  # the second: 2 policy steps (2 minibatches, 1 epoch) since the reset, not reset in between
                assert w == pytest.approx(1 + beta + beta ** 2, rel=1e-12) and not equal





def test_under_staleness_the_first_iterations_count_toward_the_run_and_the_phase(tmp_path, capsys):
    """--staleness 1, N_pi 2, 4 iterations: iteration 1 only collects, yet it counts toward the total and the phase
    clock, so the aux phases still end iterations 2 and 4; the first phase's aux phase has one rollout (4
    trajectories), the second two (8). (The official code counts only iterations that train: see the guide.)"""
    _, rows = run_tiny("ppg", tmp_path, "--staleness", "1", iterations=4)
    assert [r["policy_loss"] == "" for r in rows] == [True, False, False, False]
    assert [r["aux_kl"] != "" for r in rows] == [False, True, False, True]
    assert int(rows[-1]["global_step"]) == 4 * BATCH
    out = capsys.readouterr().out
    assert "aux epoch 1/1 over 4 trajectories" in out and "aux epoch 1/1 over 8 trajectories" in out
