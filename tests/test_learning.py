"""The scripts' own update measurably improves a policy on a small synthetic task.

A contextual bandit in Procgen's observation format: a red frame pays 1 for action 3, a blue frame
pays 1 for action 7, every episode is one step. Each iteration samples actions from the current policy,
builds the batch with the script's make_batch (GAE, advantage normalisation) and runs its update."""
import torch


TARGET = {0: 3, 1: 7}


def test_update_learns_a_contextual_bandit(script):
    module = script
    torch.manual_seed(0)
    argv = ["--num-envs", "16", "--num-steps", "8", "--num-minibatches", "2", "--no-cuda", "--learning-rate", "1e-3"]
    args = module.parse_args(argv)
    args.micro_batch_size = 0
    agent = module.Agent(15)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate)
    ewma_net = agent if module.__name__ == "ppo_ewma" else getattr(agent, "policy", None)
    extra = (module.EWMA(ewma_net, args.beta_prox),) if hasattr(module, "EWMA") else ()
    moments = module.AdvantageMoments(0.0)
    T, N = args.num_steps, args.num_envs
    colour = torch.randint(0, 2, (T, N))  # a red or blue frame at every step of every environment
    target = torch.where(colour == 0, TARGET[0], TARGET[1])

    def target_prob():
        with torch.no_grad():
            return module.F.softmax(agent.logits(rollout["obs"].flatten(0, 1)), -1).gather(
                -1, target.flatten()[:, None]).mean().item()

    history = []
    for iteration in range(12):
        rollout = module.new_rollout(T, N, "cpu")
        rollout["obs"][..., 0] = ((1 - colour) * 255).to(torch.uint8)[..., None, None]  # red frames
        rollout["obs"][..., 2] = (colour * 255).to(torch.uint8)[..., None, None]  # blue frames
        with torch.no_grad():
            logits, values = agent(rollout["obs"].flatten(0, 1))
            actions = torch.multinomial(module.F.softmax(logits, -1), 1).squeeze(-1)
        rollout["actions"] = actions.view(T, N)
        rollout["logp_behav"] = module.log_prob(logits, actions).view(T, N)
        rollout["values"] = values.view(T, N)
        rollout["rewards"] = (rollout["actions"] == target).float()
        rollout["firsts"][:] = True  # one-step episodes
        rollout["next_obs"], rollout["next_first"] = rollout["obs"][-1], torch.ones(N, dtype=torch.bool)
        history.append(target_prob())
        batch = module.make_batch(rollout, agent, moments, args)
        module.update(agent, optimizer, batch, args, *extra)
    history.append(target_prob())
    assert history[0] < 0.1  # ~1/15 at initialisation
    assert history[-1] > 0.5, history
