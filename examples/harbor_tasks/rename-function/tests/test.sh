#!/bin/bash
# Reward 1 when calc_total is renamed everywhere and the package still works.
mkdir -p /logs/verifier
fail() { echo "FAIL: $1"; echo 0 > /logs/verifier/reward.txt; exit 0; }
grep -rnw --include="*.py" --include="*.md" calc_total /app/shop && fail "calc_total is still there"
[ "$(cd /app && python3 -m shop.checkout)" = "total: 23.50" ] || fail "checkout output"
cd /app && python3 - <<'PY' || fail "package API"
import shop
from shop.cart import calc_totals_report, compute_total
assert shop.compute_total([(1.0, 3)], discount=0.5) == 1.5
assert calc_totals_report({"a": [(2.0, 2)]}) == ["a: 4.00"]
assert "compute_total" in open("/app/shop/README.md").read()
PY
echo 1 > /logs/verifier/reward.txt
