#!/bin/bash
# Reward 1 when /app/primes.txt holds exactly the first 200 primes, one per line.
mkdir -p /logs/verifier
python3 - <<'PY'
from pathlib import Path
primes, n = [], 2
while len(primes) < 200:
    if all(n % p for p in primes if p * p <= n):
        primes.append(n)
    n += 1
path = Path("/app/primes.txt")
got = path.read_text().split() if path.exists() else None
ok = got == [str(p) for p in primes]
print("primes.txt:", "ok" if ok else "missing" if got is None else f"{len(got)} lines, first {got[:3]}")
Path("/logs/verifier/reward.txt").write_text("1\n" if ok else "0\n")
PY
