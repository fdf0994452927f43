"""Checks /app/roman.py with plain asserts; exits non-zero on the first failure."""

import sys

sys.path.insert(0, "/app")

from roman import to_roman  # noqa: E402

CASES = {1: "I", 3: "III", 4: "IV", 9: "IX", 14: "XIV", 40: "XL", 90: "XC", 400: "CD", 944: "CMXLIV",
         1994: "MCMXCIV", 2024: "MMXXIV", 3999: "MMMCMXCIX"}
for number, expected in CASES.items():
    got = to_roman(number)
    assert got == expected, f"to_roman({number}) = {got!r}, expected {expected!r}"

for bad in (0, -1, 4000):
    try:
        to_roman(bad)
    except ValueError:
        continue
    raise AssertionError(f"to_roman({bad}) did not raise ValueError")
print("all roman checks passed")
