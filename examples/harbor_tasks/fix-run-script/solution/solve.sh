#!/bin/bash
set -euo pipefail
cat > /app/run.sh <<'SH'
#!/bin/bash
count=$(wc -l < /app/names.txt)
echo "hello from run.sh: $count names"
SH
chmod +x /app/run.sh
