"""LoRA fine-tuning of a generative reward-to-go model on ``maxcode value export`` pairs.

The adapter it writes is meant to be served behind an OpenAI-compatible endpoint (vLLM) and
asked by ``--maxcode-rerank=llm``, so every training example is the exact chat the scorer
sends: the scorer's system message, the exported prompt as the user turn, the label as the
answer. Held-out search trees are then scored the way the scorer scores them (greedy, first
number in the reply) to show whether the ranking it would produce is any good.

The data preparation below is plain Python, importable and testable without the training
stack; trl, peft, transformers and datasets are imported only when training starts.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from pathlib import Path
from typing import Any

from pytest_maxcode.value.scorer import SYSTEM, parse_score

REQUIRED_KEYS = ("prompt", "answer", "label", "target", "run")
EXPORT_HINT = "run searches (pytest --maxcode), then `maxcode value export` to write it"
INSTALL_HINT = "this example needs the Hugging Face training stack: pip install trl peft transformers datasets"
SCORER_MAX_TOKENS = 16  # what LLMScorer asks for; a longer reply is never seen at search time


def load_pairs(path: str | Path) -> list[dict[str, Any]]:
    """The exported pairs, checked line by line, so a stale or hand-edited file fails on the
    line that is wrong instead of deep inside tokenization."""
    path = Path(path)
    if not path.is_file():
        raise SystemExit(f"{path}: no such file; {EXPORT_HINT}")
    pairs: list[dict[str, Any]] = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise SystemExit(f"{path}:{lineno}: not JSON ({e.msg} at column {e.colno})") from None
            if not isinstance(obj, dict):
                raise SystemExit(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
            missing = [k for k in REQUIRED_KEYS if k not in obj]
            if missing:
                raise SystemExit(f"{path}:{lineno}: missing key(s) {', '.join(missing)}; {EXPORT_HINT}")
            if not isinstance(obj["prompt"], str) or not isinstance(obj["answer"], str):
                raise SystemExit(f"{path}:{lineno}: 'prompt' and 'answer' must be strings")
            if isinstance(obj["label"], bool) or not isinstance(obj["label"], (int, float)):
                raise SystemExit(f"{path}:{lineno}: 'label' must be a number, got {obj['label']!r}")
            pairs.append(obj)
    if not pairs:
        raise SystemExit(f"{path}: no prompt/answer pairs in it; {EXPORT_HINT}")
    return pairs


def to_messages(pair: dict[str, Any]) -> list[dict[str, str]]:
    """The chat the scorer sends at search time, with the label as the reply to learn."""
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": pair["prompt"]},
        {"role": "assistant", "content": pair["answer"]},
    ]


def tree_key(pair: dict[str, Any]) -> tuple[Any, str]:
    """One search tree: nodes of a tree share their parents' code, so they must not straddle the split."""
    return (pair["run"], str(pair["target"]))


def split_by_tree(pairs: list[dict[str, Any]], holdout: float, seed: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Train and held-out pairs, whole trees on each side, the same for the same seed.

    With a holdout above 0 at least one tree is held out and at least one kept for training;
    with fewer than two trees nothing can be held out and the held-out side is empty."""
    if not 0.0 <= holdout < 1.0:
        raise ValueError(f"the holdout fraction must be in [0, 1), not {holdout}")
    keys = sorted({tree_key(p) for p in pairs}, key=repr)
    if holdout == 0.0 or len(keys) < 2:
        return list(pairs), []
    random.Random(seed).shuffle(keys)
    n_test = min(len(keys) - 1, max(1, round(holdout * len(keys))))
    test_keys = set(keys[:n_test])
    train = [p for p in pairs if tree_key(p) not in test_keys]
    test = [p for p in pairs if tree_key(p) in test_keys]
    return train, test


def average_ranks(values: list[float]) -> list[float]:
    """1-based ranks, tied values sharing the mean of the ranks they span."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(a: list[float], b: list[float]) -> float | None:
    """Rank correlation: what reranking cares about is the order of the scores, not their scale.
    None where it is undefined (fewer than two points, or either side constant)."""
    if len(a) != len(b):
        raise ValueError(f"{len(a)} predictions against {len(b)} labels")
    if len(a) < 2:
        return None
    ra, rb = average_ranks(a), average_ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    va = sum((x - ma) ** 2 for x in ra)
    vb = sum((y - mb) ** 2 for y in rb)
    if va == 0 or vb == 0:
        return None
    return cov / math.sqrt(va * vb)


def mean_absolute_error(predictions: list[float], labels: list[float]) -> float | None:
    """Over the replies that held a number; None when none did."""
    errors = [abs(p - y) for p, y in zip(predictions, labels) if math.isfinite(p)]
    return sum(errors) / len(errors) if errors else None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="LoRA-tune a generative reward-to-go model on `maxcode value export` pairs (needs a GPU).",
    )
    p.add_argument("--data", default=".maxcode/value/rtg.jsonl", help="the exported JSONL (default %(default)s)")
    p.add_argument("--base-model", default="Qwen/Qwen2.5-Coder-1.5B-Instruct", help="base chat model (default %(default)s)")
    p.add_argument("--out", required=True, help="directory for the LoRA adapter (what vLLM's --lora-modules loads)")
    p.add_argument("--epochs", type=float, default=3.0, help="training epochs (default %(default)s)")
    p.add_argument("--lr", type=float, default=2e-4, help="learning rate (default %(default)s)")
    p.add_argument("--lora-r", type=int, default=16, help="LoRA rank; vLLM serves ranks up to --max-lora-rank, 16 by default (default %(default)s)")
    p.add_argument("--lora-alpha", type=int, default=32, help="LoRA alpha (default %(default)s)")
    p.add_argument("--max-length", type=int, default=2048, help="longest chat in tokens; longer training pairs are skipped (default %(default)s)")
    p.add_argument("--batch-size", type=int, default=4, help="per-device batch size for training and evaluation (default %(default)s)")
    p.add_argument("--holdout", type=float, default=0.2, help="fraction of search trees held out for evaluation, 0 for none (default %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="seed for the split and the training (default %(default)s)")
    ns = p.parse_args(argv)
    if not 0.0 <= ns.holdout < 1.0:
        p.error(f"--holdout must be in [0, 1), not {ns.holdout}")
    return ns


def _training_stack() -> dict[str, Any]:
    """The heavy imports, late, so the data checks and --help work without them."""
    try:
        import torch
        from datasets import Dataset
        from peft import LoraConfig
        from transformers import AutoTokenizer
        from trl import SFTConfig, SFTTrainer
    except ImportError:
        print(INSTALL_HINT, file=sys.stderr)
        raise SystemExit(2) from None
    return {"torch": torch, "Dataset": Dataset, "LoraConfig": LoraConfig, "AutoTokenizer": AutoTokenizer,
            "SFTConfig": SFTConfig, "SFTTrainer": SFTTrainer}


def _prompt_completion(pair: dict[str, Any]) -> dict[str, list[dict[str, str]]]:
    """Conversational prompt-completion, so TRL puts the loss on the answer only: the prompt
    (mostly code) is input, not something to imitate. A plain "messages" column would need
    ``assistant_only_loss``, which needs {% generation %} markers that Qwen2.5's template lacks."""
    messages = to_messages(pair)
    return {"prompt": messages[:2], "completion": messages[2:]}


def _chat_length(tokenizer: Any, messages: list[dict[str, str]]) -> int:
    return len(tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True)["input_ids"])


def train(args: argparse.Namespace, train_pairs: list[dict[str, Any]]) -> tuple[Any, Any]:
    """Fit the adapter and save it (with the tokenizer) to ``args.out``; the model and
    tokenizer come back for the held-out evaluation."""
    hf = _training_stack()
    torch = hf["torch"]
    tokenizer = hf["AutoTokenizer"].from_pretrained(args.base_model)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    # TRL truncates from the end, which would cut the answer off a long prompt: drop those instead
    fitting = [p for p in train_pairs if _chat_length(tokenizer, to_messages(p)) <= args.max_length]
    if len(fitting) < len(train_pairs):
        print(f"skipped {len(train_pairs) - len(fitting)} of {len(train_pairs)} training pair(s) longer than "
              f"--max-length {args.max_length} tokens")
    if not fitting:
        raise SystemExit("no training pair fits --max-length; raise it")
    bf16 = bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    config = hf["SFTConfig"](
        output_dir=args.out,
        num_train_epochs=args.epochs,
        learning_rate=args.lr,
        per_device_train_batch_size=args.batch_size,
        max_length=args.max_length,
        completion_only_loss=True,
        bf16=bf16,
        logging_steps=10,
        save_strategy="no",
        report_to="none",
        seed=args.seed,
    )
    lora = hf["LoraConfig"](
        r=args.lora_r, lora_alpha=args.lora_alpha, lora_dropout=0.05,
        target_modules="all-linear", task_type="CAUSAL_LM",
    )
    trainer = hf["SFTTrainer"](
        model=args.base_model,
        args=config,
        train_dataset=hf["Dataset"].from_list([_prompt_completion(p) for p in fitting]),
        processing_class=tokenizer,
        peft_config=lora,
    )
    trainer.train()
    trainer.save_model(args.out)
    print(f"saved the LoRA adapter to {args.out}")
    return trainer.model, tokenizer


def predict(model: Any, tokenizer: Any, pairs: list[dict[str, Any]], batch_size: int) -> list[float]:
    """Score pairs as ``--maxcode-rerank=llm`` does: greedy, at most 16 new tokens, first number."""
    import torch

    model.eval()
    tokenizer.padding_side = "left"  # decoder-only generation continues from the right edge
    scores: list[float] = []
    for start in range(0, len(pairs), batch_size):
        batch = pairs[start:start + batch_size]
        texts = [tokenizer.apply_chat_template(to_messages(p)[:2], tokenize=False, add_generation_prompt=True)
                 for p in batch]
        enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        input_ids, attention_mask = enc["input_ids"].to(model.device), enc["attention_mask"].to(model.device)
        with torch.inference_mode():
            out = model.generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=SCORER_MAX_TOKENS,
                                 do_sample=False, use_cache=True, pad_token_id=tokenizer.pad_token_id)
        replies = tokenizer.batch_decode(out[:, input_ids.shape[1]:], skip_special_tokens=True)
        scores.extend(parse_score(r) for r in replies)
    return scores


def report(predictions: list[float], labels: list[float], trees: int) -> str:
    """One line: the ranking quality (what the reranker uses) and the scale error."""
    rho = spearman(predictions, labels)
    mae = mean_absolute_error(predictions, labels)
    unparsed = sum(not math.isfinite(p) for p in predictions)
    return (f"held out {len(labels)} pair(s) from {trees} tree(s): "
            f"Spearman {'-' if rho is None else f'{rho:.3f}'}, "
            f"MAE {'-' if mae is None else f'{mae:.3f}'}, "
            f"{unparsed} reply(ies) without a number")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    pairs = load_pairs(args.data)
    train_pairs, test_pairs = split_by_tree(pairs, args.holdout, args.seed)
    n_trees = len({tree_key(p) for p in pairs})
    print(f"{len(pairs)} pair(s) from {n_trees} tree(s): {len(train_pairs)} to train on, {len(test_pairs)} held out")
    model, tokenizer = train(args, train_pairs)
    if not test_pairs:
        print("no held-out trees (--holdout 0, or a single tree): skipping the evaluation")
        return 0
    predictions = predict(model, tokenizer, test_pairs, args.batch_size)
    print(report(predictions, [float(p["label"]) for p in test_pairs], len({tree_key(p) for p in test_pairs})))
    return 0


if __name__ == "__main__":
    sys.exit(main())
