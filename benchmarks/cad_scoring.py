"""Time cad/gen-v1 scoring of oracle programs end to end.

Each score: subset check, the program run in the sandbox ForkServer (numpy +
manifold3d preloaded), mesh decoding, target build (host, first time per task),
voxel IoU, silhouettes, Chamfer and validity. The fork server's start-up is timed
apart (``startup_s``) and a warm-up score is excluded from ``total_s``.

Usage: python benchmarks/cad_scoring.py [--n 100] [--seed 0] [--json]
With ``--json`` the last stdout line is
``{"n", "total_s", "per_program_ms", "oracle_mean", "startup_s", "by_difficulty_ms"}``.
"""

from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100, help="oracle programs to score")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="one JSON object on the last line")
    args = parser.parse_args()

    from polyrl.domains.cad.domain import CadGenDomain
    from polyrl.domains.cad.runner import default_server

    t0 = time.perf_counter()
    default_server().run_python("pass")
    startup_s = time.perf_counter() - t0

    domain = CadGenDomain()
    warm = next(domain.tasks("test", n=1, seed=args.seed + 1))
    domain.score(warm, domain.oracle(warm))
    tasks = list(domain.tasks("train", n=args.n, seed=args.seed))

    rewards, by_level = [], {}
    start = time.perf_counter()
    for task in tasks:
        t = time.perf_counter()
        rewards.append(domain.score(task, domain.oracle(task)).reward)
        by_level.setdefault(task.difficulty, []).append(time.perf_counter() - t)
    total_s = time.perf_counter() - start

    result = {
        "n": len(tasks),
        "total_s": round(total_s, 3),
        "per_program_ms": round(1000 * total_s / len(tasks), 2),
        "oracle_mean": sum(rewards) / len(rewards),
        "startup_s": round(startup_s, 3),
        "by_difficulty_ms": {str(k): round(1000 * sum(v) / len(v), 2)
                             for k, v in sorted(by_level.items())},
    }
    if not args.json:
        for key, value in result.items():
            print(f"{key:>18}: {value}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
