"""One rank of the data-parallel tests (``test_distributed.py``), launched by
``python -m torch.distributed.run --standalone --nproc-per-node 2 dist_worker.py MODE OUT``.

``update``: ``policy_update`` of every case of ``UPDATE_CASES`` on this rank's share of
``update_groups()``; writes ``OUT/update-<case>-rank<r>.pt`` (parameters and figures);
then rank 0 releases rank 1 as a failed session (``OUT/follower-exit-code``) and, once
rank 1 has exited, ends a session with exit 130 (``OUT/interrupted-exit``).
``trainer``: ``TRAINER_STEPS`` steps of a ``Trainer`` in ``OUT/run``; writes
``OUT/trainer-rank<r>.pt`` (parameters, metrics history).
``crash``: rank 0 raises in step 2; rank 1 writes the error it got to ``OUT/rank1-error``.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import random
import sys
import time
from pathlib import Path

import torch

from polyrl.train.groups import Group
from polyrl.train.update import UpdateOptions, chunk_logprobs, policy_update
from polyrl.types import Task

UPDATE_CASES = {
    "token-mean": {"loss_agg": "token-mean"},
    "seq-mean-token-sum": {"loss_agg": "seq-mean-token-sum"},
    "seq-mean-token-mean": {"loss_agg": "seq-mean-token-mean"},
    "seq-mean-token-sum-norm": {"loss_agg": "seq-mean-token-sum-norm"},
    "kl": {"loss_agg": "token-mean", "kl_coef": 0.1},
    "two-iterations": {"loss_agg": "seq-mean-token-mean", "num_iterations": 2},
    "rank1-empty": {"loss_agg": "token-mean", "kl_coef": 0.1},
}
"""Case name -> ``UpdateOptions`` fields; ``rank1-empty`` gives rank 0 every group."""

TRAINER_STEPS = 3
LR = 0.5


def update_groups() -> list[Group]:
    """Five groups of different prompts and lengths (the longest completion in group 0,
    rank 0's), one replayed with behaviour log-probs, one with repeated rows."""
    rng = random.Random(3)
    groups = []
    for n in range(5):
        task = Task(id=f"t{n}", domain="d/x-v1", split="train", difficulty=1, prompt=[],
                    reference="")
        comps = [[rng.randrange(3, 250) for _ in range(rng.randint(1, 3 if n else 9))]
                 for _ in range(4)]
        if n == 3:
            comps[2] = list(comps[0])
        rewards = [float(rng.random() < 0.5) for _ in comps]
        adv = [rng.uniform(-1.5, 1.5) for _ in comps]
        if n == 3:
            rewards[2], adv[2] = rewards[0], adv[0]
        replayed = n == 4
        mu = [[rng.uniform(-6.0, -4.0) for _ in c] if replayed else [] for c in comps]
        groups.append(Group(task=task, arm=0, prompt_ids=[rng.randrange(3, 250)
                                                          for _ in range(2 + n)],
                            completions=comps, behaviour_logprobs=mu, rewards=rewards,
                            advantages=adv, policy_version=0, replayed=replayed))
    return groups


def run_update(case: str, groups: list[Group], dp=None):
    """``policy_update`` of ``case`` on ``groups`` from the seed-0 tiny model (SGD, lr
    ``LR``); returns (parameters, stats)."""
    from polyrl.models.tiny import build_tiny_model

    model = build_tiny_model(hidden_size=64, num_layers=2, num_heads=2, intermediate_size=128,
                             max_position_embeddings=1024, seed=0)
    opts = UpdateOptions(micro_batch_size=3, **UPDATE_CASES[case])
    ref = None
    if opts.kl_coef > 0:
        ref = copy.deepcopy(model).eval()
        torch.nn.utils.vector_to_parameters(  # a reference apart from the policy
            torch.nn.utils.parameters_to_vector(ref.parameters()) * 0.9, ref.parameters())
    opt = torch.optim.SGD(model.parameters(), lr=LR)

    def ref_fn(chunk):
        with torch.no_grad():
            return chunk_logprobs(ref, chunk, opts, with_entropy=False).logprobs

    stats = policy_update(model, opt, groups, opts, ref_fn if ref is not None else None, dp=dp)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}, stats


def _update_mode(dp, out: Path) -> None:
    groups = update_groups()
    for case in UPDATE_CASES:
        mine = (groups if dp.rank == 0 else []) if case == "rank1-empty" else dp.shard(groups)
        params, stats = run_update(case, mine, dp)
        torch.save({"params": params, "stats": dataclasses.asdict(stats)},
                   out / f"update-{case}-rank{dp.rank}.pt")
    # rank 0 fails before RL: it releases the follower, which exits 1 without training
    from polyrl.eval.follower import HandOff, follow_main_job

    if dp.is_main:
        handoff = HandOff(dp)
        handoff.release(failed=True)
        handoff.release()  # once only: a second would wait for a partner forever
        _interrupted_after_follower_left(dp, out)
    else:
        (out / "follower-exit-code").write_text(str(follow_main_job(out, dp)))
        (out / "follower-pid").write_text(str(os.getpid()))
        os._exit(0)  # gone as a rank torchrun ended is (no destroy: rank 0 still holds the group)


def _interrupted_after_follower_left(dp, out: Path) -> None:
    """Rank 0, once rank 1 has exited: ``_data_parallel`` whose main job ends with exit
    130 (SIGTERM before RL, torchrun having ended the other ranks); writes the exception
    that came out to ``OUT/interrupted-exit``."""
    import typer

    from polyrl.cli.run import _data_parallel

    pid_file, deadline = out / "follower-pid", time.monotonic() + 120
    while time.monotonic() < deadline:  # gone: no such process, or a zombie
        if pid_file.is_file() and pid_file.read_text():
            try:
                stat = Path(f"/proc/{pid_file.read_text()}/stat").read_text()
            except OSError:
                break
            if stat.rsplit(")", 1)[1].split()[0] in "ZX":
                break
        time.sleep(0.1)

    class Start:
        run_dir = out

        def __call__(self, handoff) -> None:
            raise typer.Exit(130)

    try:
        _data_parallel(Start())
    except BaseException as e:  # noqa: BLE001 - what came out is the finding
        (out / "interrupted-exit").write_text(f"{type(e).__name__} {getattr(e, 'exit_code', e)}")


def trainer_cfg():
    """The 2-rank trainer test's config (KL, two iterations, replay)."""
    from polyrl.config import RunConfig

    return RunConfig.model_validate({
        "run": {"seed": 7},
        "rollout": {"group_size": 4, "max_new_tokens": 5, "temperature": 1.0},
        "domains": [{"id": "test/echo-v1", "difficulty": [1, 2]},
                    {"id": "test/echo2-v1", "difficulty": [1]}],
        "train": {"prompts_per_step": 3, "lr": 1e-3, "checkpoint_every": 2,
                  "micro_batch_size": 4, "kl_coef": 0.05, "num_iterations": 2,
                  "steps": TRAINER_STEPS},
        "replay": {"mix_fraction": 1.0},
    })


def _trainer_mode(dp, out: Path) -> None:
    from polyrl.train import Trainer
    from train.conftest import EchoDomain, tiny_policy

    doms = [EchoDomain("test/echo-v1"), EchoDomain("test/echo2-v1")]
    trainer = Trainer(trainer_cfg(), tiny_policy(), doms, out / "run", dp=dp)
    history = trainer.fit()
    torch.save({"params": {k: v.detach().clone() for k, v in trainer.model.state_dict().items()},
                "history": history, "step": trainer.step}, out / f"trainer-rank{dp.rank}.pt")


def _crash_mode(dp, out: Path) -> None:
    """Rank 0 raises while sampling step 2; rank 1 must see its next collective fail
    (written to ``OUT/rank1-error``) rather than wait forever."""
    from polyrl.train import Trainer
    from train.conftest import EchoDomain, tiny_policy

    doms = [EchoDomain("test/echo-v1"), EchoDomain("test/echo2-v1")]
    policy = tiny_policy()
    trainer = Trainer(trainer_cfg(), policy, doms, out / "run", dp=dp)
    generate = policy.generate

    def failing(*args, **kwargs):
        if dp.is_main and trainer.step == 1:
            raise RuntimeError("injected failure on rank 0")
        return generate(*args, **kwargs)

    policy.generate = failing
    try:
        trainer.fit()
    except Exception as e:
        if not dp.is_main:
            (out / "rank1-error").write_text(f"{type(e).__name__}: {e}"[:500])
        raise


def main() -> None:
    """Join the process group (gloo) and run ``sys.argv[1]``'s mode into ``sys.argv[2]``."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: train.conftest
    from polyrl.train.distributed import init_from_env

    torch.set_num_threads(1)
    dp = init_from_env(timeout_s=120, backend="gloo")
    assert dp is not None and dp.world_size == 2
    mode, out = sys.argv[1], Path(sys.argv[2])
    {"update": _update_mode, "trainer": _trainer_mode, "crash": _crash_mode}[mode](dp, out)
    if torch.distributed.is_initialized():  # update mode's rank 0 has destroyed it
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
