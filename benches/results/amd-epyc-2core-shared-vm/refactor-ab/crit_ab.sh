#!/bin/bash
# Alternates the old and new criterion kernel benches (dense/*), 3 rounds; prints the median estimate per bench.
OLDB=$1 NEWB=$2 FILTER=$3
for r in $(seq 1 ${ROUNDS:-3}); do
  for which in old new; do
    b=$OLDB; [ $which = new ] && b=$NEWB
    $b --bench "$FILTER" --warm-up-time 1 --measurement-time 2 --noplot 2>/dev/null | python3 -c "
import sys,re
name=None
for line in sys.stdin:
    m=re.match(r'^(dense/\S+|mechanism/\S+)',line)
    if m: name=m.group(1)
    t=re.search(r'time:\s+\[\S+ \S+ (\S+) (\S+) \S+ \S+\]',line)
    if t and name: print('$which',$r,name,t.group(1),t.group(2)); name=None
"
  done
done
