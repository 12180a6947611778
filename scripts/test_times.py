"""Sums the per-test times of ``TF_DP_TEST_TIMES`` per test file.

Usage: python scripts/test_times.py TIMES_FILE [TOP]
"""

import collections
import sys


def main(path, top=40):
  top = int(top)
  per_file = collections.Counter()
  per_test = []
  with open(path, encoding="utf-8") as lines:
    for line in lines:
      seconds, node = line.rstrip("\n").split("\t", 1)
      per_file[node.split("::", 1)[0]] += float(seconds)
      per_test.append((float(seconds), node))
  print(f"total {sum(per_file.values()):.0f} s over {len(per_test)} tests")
  for name, seconds in per_file.most_common(top):
    print(f"{seconds:8.1f}  {name}")
  print("slowest tests:")
  for seconds, node in sorted(per_test, reverse=True)[:top]:
    print(f"{seconds:8.1f}  {node}")


if __name__ == "__main__":
  main(*sys.argv[1:])
