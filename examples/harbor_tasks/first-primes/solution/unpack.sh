#!/bin/bash
# unpack.sh GZ DEST: write GZ's contents to DEST.
set -euo pipefail
gzip -dc "$1" > "$2"
echo "unpacked $(wc -l < "$2") lines to $2"
