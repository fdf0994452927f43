#!/bin/bash
set -euo pipefail
cat > /app/roman.py <<'PY'
"""Whole numbers in Roman numerals."""

SYMBOLS = [(1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),
           (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")]


def to_roman(number: int) -> str:
    if not 1 <= number <= 3999:
        raise ValueError(f"{number} is outside 1..3999")
    digits = []
    for value, symbol in SYMBOLS:
        count, number = divmod(number, value)
        digits.append(symbol * count)
    return "".join(digits)
PY
