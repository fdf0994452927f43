#!/bin/bash
set -euo pipefail
cd /app/data
find . -maxdepth 1 -type f -printf '%f\n' | LC_ALL=C sort | xargs sha256sum > /app/SHA256SUMS
