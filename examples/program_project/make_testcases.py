"""Writes testcases/prefix_sums/: three inputs and their expected outputs (seeded, reproducible)."""

import random
from pathlib import Path

out = Path(__file__).parent / "testcases" / "prefix_sums"
out.mkdir(parents=True, exist_ok=True)
for k, n in enumerate((3000, 5000, 8000), 1):
    rng = random.Random(k)
    a = [rng.randint(-9999, 9999) for _ in range(n)]
    (out / f"input.{k}.txt").write_text(f"{n}\n" + " ".join(map(str, a)) + "\n")
    sums, s = [], 0
    for x in a:
        s += x
        sums.append(str(s))
    (out / f"output.{k}.txt").write_text("\n".join(sums) + "\n")
