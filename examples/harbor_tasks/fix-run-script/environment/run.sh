#!/bin/bsh
count=$(wc -l < names.txt)
echo "hello from run.sh: $count names"
