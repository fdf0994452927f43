#!/bin/bash
# The answer ships precomputed (gzip'd) with an executable helper that unpacks it: solution/ is copied with its
# bytes and modes, as harbor copies it.
set -euo pipefail
/solution/unpack.sh /solution/primes.txt.gz /app/primes.txt
