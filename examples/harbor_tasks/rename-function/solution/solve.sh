#!/bin/bash
set -euo pipefail
grep -rlw calc_total /app/shop | xargs sed -i 's/\bcalc_total\b/compute_total/g'
