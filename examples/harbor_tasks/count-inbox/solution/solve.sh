#!/bin/bash
# Relative paths and $INBOX (task.toml's [solution.env]): the oracle runs in the image's working directory (/app).
set -euo pipefail
find "$INBOX" -maxdepth 1 -type f -name '*.txt' | wc -l > count.txt
