#!/bin/bash
# Reward 1 when /app/SHA256SUMS lists exactly the top-level files of /app/data, sorted, and all check out.
mkdir -p /logs/verifier
fail() { echo "FAIL: $1"; echo 0 > /logs/verifier/reward.txt; exit 0; }
[ -f /app/SHA256SUMS ] || fail "no /app/SHA256SUMS"
names="$(awk '{print $2}' /app/SHA256SUMS | sed 's/^\*//' | tr '\n' ' ')"
[ "$names" = "a.txt b.txt c.json zeros.bin " ] || fail "lists: $names"
(cd /app/data && sha256sum --strict -c /app/SHA256SUMS) || fail "checksums do not match"
echo 1 > /logs/verifier/reward.txt
