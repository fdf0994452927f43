#!/bin/bash
set -euo pipefail
cat > /app/backup.sh <<'SH'
#!/bin/bash
set -euo pipefail
if [ $# -ne 1 ] || [ ! -d "$1" ]; then
  echo "usage: backup.sh DIRECTORY (an existing directory)" >&2
  exit 1
fi
source_dir="$(cd "$1" && pwd)"
name="$(basename "$source_dir")"
mkdir -p /app/backups
tar -czf "/app/backups/$name.tar.gz" -C "$(dirname "$source_dir")" "$name"
echo "/app/backups/$name.tar.gz"
SH
chmod +x /app/backup.sh
