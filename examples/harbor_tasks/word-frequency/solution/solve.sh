#!/bin/bash
set -euo pipefail
python3 - <<'PY'
import json
import re
from collections import Counter

words = re.findall(r"[a-z]+", open("/app/book.txt").read().lower())
top = sorted(Counter(words).items(), key=lambda item: (-item[1], item[0]))[:5]
with open("/app/top_words.json", "w") as out:
    json.dump(dict(top), out)
PY
