#!/bin/bash
set -euo pipefail
name="$(tr -d '[:space:]' < /app/project_name.txt)"
root=/app/inventory
mkdir -p "$root/src/inventory" "$root/tests" "$root/docs"
touch "$root/src/inventory/__init__.py" "$root/tests/__init__.py"
printf '# %s\n' "$name" > "$root/README.md"
printf '[project]\nname = "%s"\nversion = "0.1.0"\n' "$name" > "$root/pyproject.toml"
