#!/bin/bash
# Reward 1 when /app/inventory has exactly the asked-for layout.
mkdir -p /logs/verifier
fail() { echo "FAIL: $1"; echo 0 > /logs/verifier/reward.txt; exit 0; }
root=/app/inventory
[ -d "$root" ] || fail "no $root"
listing="$(cd "$root" && find . -mindepth 1 | sort | tr '\n' ' ')"
[ "$listing" = "./README.md ./docs ./pyproject.toml ./src ./src/inventory ./src/inventory/__init__.py ./tests ./tests/__init__.py " ] \
  || fail "layout is: $listing"
[ -d "$root/docs" ] || fail "docs is not a directory"
[ "$(head -n1 "$root/README.md")" = "# stock-keeper" ] || fail "README.md title"
grep -qx 'name = "stock-keeper"' "$root/pyproject.toml" || fail "pyproject.toml name"
echo 1 > /logs/verifier/reward.txt
