"""GRPO fine-tuning of a kernel-writing model with the maxcode oracle as the reward.

Each prompt is the search's own first request for one problem (a KernelBench problem, or a
target a ``pytest --maxcode`` run captured); each completion is built, checked on seeded
inputs and timed against the reference, and its reward is what the search would give it
(the speedup when correct, a tiered penalty otherwise). Optionally, the qd strategy's
staged technique schedule runs as a per-problem curriculum.

trl and transformers are imported only when training starts, so ``--dry-run`` (build the
dataset, print one prompt) works anywhere pytest-maxcode does.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

INSTALL_HINT = "training needs TRL: pip install 'trl>=0.20' transformers datasets accelerate"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    src = p.add_argument_group("problems (one of)")
    src.add_argument("--kernelbench", metavar="DIR", help="a KernelBench checkout (or its KernelBench/ or level folder)")
    src.add_argument("--targets", metavar="ROOT", help="a project where pytest --maxcode captured targets (.maxcode/inputs/)")
    p.add_argument("--level", type=int, default=1)
    p.add_argument("--problems", help="KernelBench problem numbers, e.g. 1-20,23")
    p.add_argument("--scale", type=float, default=1.0, help="multiply the KernelBench problems' sizes (e.g. 0.25 for fast rewards)")
    p.add_argument("--format", choices=("native", "compat"), default="native", help="C++/CUDA ABI kernels, or ModelNew Python files")
    p.add_argument("--device", choices=("cpu", "cuda"), default=None,
                   help="where candidates run and are timed (default: cuda when available); cpu trains C++ kernels")
    p.add_argument("--stages", help='a staged schedule as JSON, e.g. \'[{"steps": 4, "techniques": ["loop"]}, {"techniques": "any"}]\'')
    p.add_argument("--qd-config", metavar="PYPROJECT", help="take the schedule from [tool.maxcode.qd] in this pyproject.toml")
    p.add_argument("--advance-after", type=int, help="correct completions that move a problem to its next stage (default: the stage's steps)")
    p.add_argument("--model", default="Qwen/Qwen2.5-Coder-1.5B-Instruct")
    p.add_argument("--out", default="grpo-kernels")
    p.add_argument("--max-steps", type=int, default=200)
    p.add_argument("--num-generations", type=int, default=8, help="completions per prompt (GRPO's group)")
    p.add_argument("--batch-size", type=int, default=8, help="per-device batch, in completions (a multiple of --num-generations)")
    p.add_argument("--grad-accum", type=int, default=1)
    p.add_argument("--lr", type=float, default=1e-6)
    p.add_argument("--max-completion-length", type=int, default=4096)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--reward-scale", choices=("linear", "log"), default="linear", help="log: a correct speedup s gives log2(1+s)")
    p.add_argument("--time-budget", type=float, default=0.2, help="seconds of timing per workload and candidate")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds a candidate may run")
    p.add_argument("--min-speedup", type=float, default=1.05)
    p.add_argument("--max-oracles", type=int, default=8, help="problems kept warm (one worker process each)")
    p.add_argument("--concurrency", type=int, default=1, help="problems checked at once (more is faster, timings noisier)")
    p.add_argument("--async-reward", action="store_true", help="pass the reward as an async function")
    p.add_argument("--vllm", action="store_true", help="generate with vLLM (colocated)")
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--save-steps", type=int, default=50)
    p.add_argument("--dry-run", action="store_true", help="build the dataset, print its first prompt, and stop")
    ns = p.parse_args(argv)
    if bool(ns.kernelbench) == bool(ns.targets):
        p.error("give exactly one of --kernelbench DIR and --targets ROOT")
    if ns.stages and ns.qd_config:
        p.error("give --stages or --qd-config, not both")
    return ns


def make_curriculum(ns: argparse.Namespace) -> Any:
    from pytest_maxcode.rl import Curriculum

    if ns.stages:
        return Curriculum(json.loads(ns.stages), advance_after=ns.advance_after)
    if ns.qd_config:
        try:
            import tomllib
        except ModuleNotFoundError:  # Python 3.10
            import tomli as tomllib

        table = tomllib.loads(Path(ns.qd_config).read_text()).get("tool", {}).get("maxcode", {}).get("qd")
        if table is None:
            raise SystemExit(f"{ns.qd_config}: no [tool.maxcode.qd] table")
        return Curriculum(table, advance_after=ns.advance_after)
    return None


def reward_root(ns: argparse.Namespace) -> Path:
    """Where the oracle keeps its builds: the project for captured targets, else here."""
    return Path(ns.targets).resolve() if ns.targets else Path.cwd()


def build_dataset(ns: argparse.Namespace, curriculum: Any, as_dataset: bool) -> Any:
    from pytest_maxcode.rl import kernelbench_dataset, targets_dataset

    if ns.kernelbench:
        return kernelbench_dataset(ns.kernelbench, ns.level, ns.problems, ns.scale, ns.format, device=ns.device,
                                   curriculum=curriculum, as_dataset=as_dataset)
    return targets_dataset(ns.targets, ns.format, device=ns.device, curriculum=curriculum, as_dataset=as_dataset)


def grpo_config(GRPOConfig: Any, ns: argparse.Namespace) -> Any:
    """The settings, less those this TRL version does not have (their names move between releases)."""
    wanted = dict(
        output_dir=ns.out, max_steps=ns.max_steps, learning_rate=ns.lr, per_device_train_batch_size=ns.batch_size,
        gradient_accumulation_steps=ns.grad_accum, num_generations=ns.num_generations,
        max_completion_length=ns.max_completion_length, temperature=ns.temperature, bf16=ns.bf16, use_vllm=ns.vllm,
        vllm_mode="colocate", logging_steps=1, save_steps=ns.save_steps, log_completions=True, report_to=[],
    )
    known = {f.name for f in dataclasses.fields(GRPOConfig)}
    dropped = sorted(k for k in wanted if k not in known)
    if dropped:
        print(f"this TRL has no {', '.join(dropped)}: left at its defaults", file=sys.stderr)
    return GRPOConfig(**{k: v for k, v in wanted.items() if k in known})


def main(argv: list[str] | None = None) -> int:
    ns = parse_args(argv)
    curriculum = make_curriculum(ns)
    if ns.dry_run:
        rows = build_dataset(ns, curriculum, as_dataset=False)
        print(f"{len(rows)} problem(s); the first prompt ({rows[0]['problem_id']}):\n")
        for m in rows[0]["prompt"]:
            print(f"--- {m['role']}\n{m['content']}\n")
        return 0
    try:
        from trl import GRPOConfig, GRPOTrainer
    except ImportError:
        print(INSTALL_HINT, file=sys.stderr)
        return 2
    from pytest_maxcode.oracle.check import CheckConfig
    from pytest_maxcode.rl import OracleReward, async_reward

    dataset = build_dataset(ns, curriculum, as_dataset=True)
    config = CheckConfig(device=ns.device, time_budget=ns.time_budget, timeout=ns.timeout, min_speedup=ns.min_speedup)
    reward = OracleReward(reward_root(ns), config, device=ns.device, fmt=ns.format, scale=ns.reward_scale,
                          curriculum=curriculum, max_oracles=ns.max_oracles, concurrency=ns.concurrency,
                          progress=lambda msg: print(f"[oracle] {msg}", file=sys.stderr))
    try:
        trainer = GRPOTrainer(model=ns.model, reward_funcs=[async_reward(reward) if ns.async_reward else reward],
                              args=grpo_config(GRPOConfig, ns), train_dataset=dataset)
        trainer.train()
        trainer.save_model(ns.out)
    finally:
        reward.close()
        if curriculum is not None:
            Path(ns.out).mkdir(parents=True, exist_ok=True)
            (Path(ns.out) / "curriculum.json").write_text(json.dumps(curriculum.state_dict(), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
