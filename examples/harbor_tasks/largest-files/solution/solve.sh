#!/bin/bash
set -euo pipefail
cd /app/data
find . -type f -printf '%s %P\n' | sort -k1,1nr | head -n 3 | cut -d' ' -f2- > /app/largest.txt
