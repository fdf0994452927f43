"""The `train` split: small Python functions in HumanEval's shape, from families with varied parameters.

Each family is a kind of function (count a letter, rotate a list, write a number in a base, ...) and
each parameter makes it a distinct problem with its own name, docstring, reference solution and
tests (`train/count_letter_e`, `train/rotate_left_2`, ...). The expected values in the docstring's
examples and in the hidden tests are computed by running the reference solution on fixed inputs, and
the package's tests check that every reference passes its tests and that a stub fails them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .problems import Problem, Step, loaded_once

__all__ = ["Family", "FAMILIES", "train_ids", "train_problems"]

#: How many of a family's inputs the docstring shows as examples; every input is a hidden test.
EXAMPLES = 2


@dataclass(frozen=True)
class Family:
    """Problems that differ by one parameter `p`; `{p}` in the texts is replaced by it."""

    name: str
    params: tuple[object, ...]
    signature: str
    doc: str
    body: str
    inputs: tuple[str, ...]

    def problem_name(self, param: object) -> str:
        return self.name.format(p=param)

    def build(self, param: object) -> Problem:
        """The problem for one parameter, its expected values computed by running the reference."""
        name = self.problem_name(param)
        namespace: dict[str, object] = {}
        header = f"def {name}{self.signature}:\n"
        exec(header + _indent(self.body.format(p=param)), namespace)  # noqa: S102 - our own reference code
        inputs = [arguments.format(p=param) for arguments in self.inputs]
        calls = [(arguments, namespace[name](*eval(f"({arguments},)", {}))) for arguments in inputs]
        examples = "".join(f"    >>> {name}({arguments})\n    {value!r}\n" for arguments, value in calls[:EXAMPLES])
        prompt = f'{header}    """{self.doc.format(p=param)}\n{examples}    """\n'
        steps = tuple(Step(f"assert candidate({arguments}) == {value!r}", True) for arguments, value in calls)
        return Problem(f"train/{name}", prompt, name, prompt + _indent(self.body.format(p=param)), "", steps)


def _indent(body: str) -> str:
    return "".join(f"    {line}\n" for line in body.strip("\n").splitlines())


FAMILIES: tuple[Family, ...] = (
    Family("count_letter_{p}", tuple("aeiostxz"), "(text: str) -> int",
           "Return how many times the letter '{p}' occurs in text, in lower or upper case.",
           "return text.lower().count('{p}')",
           ("'Banana Split'", "'Excess is expensive'", "''", "'Tooth Zoo Taxi'", "'a e i o u s t x z'",
            "'Mississippi'")),
    Family("sum_of_multiples_of_{p}", (2, 3, 4, 5, 6, 7, 8, 9), "(n: int) -> int",
           "Return the sum of the positive whole numbers below n that are multiples of {p}.",
           "return sum(k for k in range(1, n) if k % {p} == 0)",
           ("20", "1", "100", "{p}", "57", "0")),
    Family("sum_of_powers_{p}", (1, 2, 3, 4, 5, 6), "(numbers: list[int]) -> int",
           "Return the sum of each number raised to the power {p}.",
           "return sum(x ** {p} for x in numbers)",
           ("[1, 2, 3]", "[]", "[-2, 5]", "[0, 0, 7]", "[10, -1, 1]")),
    Family("rotate_left_{p}", (1, 2, 3, 4, 5, 6), "(items: list) -> list",
           "Return items rotated {p} places to the left (wrapping around); an empty list stays empty.",
           "if not items:\n    return []\nk = {p} % len(items)\nreturn items[k:] + items[:k]",
           ("[1, 2, 3, 4, 5, 6, 7]", "['a', 'b']", "[]", "[9]", "list(range(10))", "[3, 1, 4, 1, 5]")),
    Family("caesar_shift_{p}", (1, 3, 5, 7, 11, 13, 19, 25), "(text: str) -> str",
           "Shift every lowercase letter of text {p} places forward in the alphabet, wrapping from 'z' to 'a'. "
           "Other characters stay as they are.",
           "return ''.join(chr((ord(c) - 97 + {p}) % 26 + 97) if 'a' <= c <= 'z' else c for c in text)",
           ("'hello world'", "'xyz'", "''", "'Attack at Dawn!'", "'the quick brown fox'")),
    Family("chunks_of_{p}", (2, 3, 4, 5, 6, 7), "(items: list) -> list",
           "Split items into consecutive lists of {p} items; the last one may be shorter.",
           "return [items[i:i + {p}] for i in range(0, len(items), {p})]",
           ("list(range(10))", "[]", "['x']", "list('abcdefghijklmnop')", "[1, 2, 3, 4, 5, 6, 7]")),
    Family("clamp_to_{p}", (1, 5, 10, 25, 50, 100), "(numbers: list[int]) -> list[int]",
           "Return the numbers with each one limited to the range from -{p} to {p}.",
           "return [max(-{p}, min({p}, x)) for x in numbers]",
           ("[0, 3, -7, 200]", "[]", "[-1000, 1000, 42, -42]", "[{p}, -{p}, 1]", "[6, 11, 26, 51, 101]")),
    Family("words_longer_than_{p}", (2, 3, 4, 5, 6, 7), "(sentence: str) -> list[str]",
           "Return the words of sentence (separated by spaces) longer than {p} letters, in order.",
           "return [word for word in sentence.split() if len(word) > {p}]",
           ("'the quick brown fox jumps over the lazy dog'", "''", "'extraordinary things happen daily'",
            "'a bb ccc dddd eeeee ffffff ggggggg hhhhhhhh'", "'python is fun'")),
    Family("digit_sum_base_{p}", (2, 3, 4, 5, 6, 7, 8, 9, 10), "(n: int) -> int",
           "Return the sum of the digits of the non-negative number n written in base {p}.",
           "total = 0\nwhile n:\n    n, digit = divmod(n, {p})\n    total += digit\nreturn total",
           ("0", "1", "255", "1000", "123456", "{p}")),
    Family("every_nth_{p}", (2, 3, 4, 5, 6, 7), "(items: list) -> list",
           "Return every {p}th item of items: the items at positions {p}, 2*{p}, ... counting from 1.",
           "return items[{p} - 1::{p}]",
           ("list(range(1, 21))", "[]", "list('abcdefghijklmnopqrstuvwxyz')", "[True, False]", "list(range(100))")),
    Family("repeat_letters_{p}", (2, 3, 4, 5), "(text: str) -> str",
           "Return text with every character repeated {p} times in a row.",
           "return ''.join(c * {p} for c in text)",
           ("'abc'", "''", "'Hi!'", "'a b'", "'xyz123'")),
    Family("count_divisible_by_{p}", (2, 3, 4, 5, 7, 11), "(numbers: list[int]) -> int",
           "Return how many of the numbers are divisible by {p} (zero counts; negative numbers too).",
           "return sum(1 for x in numbers if x % {p} == 0)",
           ("[1, 2, 3, 4, 5, 6]", "[]", "list(range(-30, 31))", "[0, 0, 0]", "[77, 121, 35, 8, 9, 10]")),
    Family("pad_to_width_{p}", (4, 6, 8, 10, 12), "(text: str) -> str",
           "Return text with '*' characters added on the left until it is {p} characters long; longer text is "
           "returned unchanged.",
           "return text.rjust({p}, '*')",
           ("'abc'", "''", "'a much longer piece of text'", "'42'", "'hello'")),
    Family("replace_vowels_with_{p}", tuple("01789"), "(text: str) -> str",
           "Return text with every vowel (a, e, i, o, u, in lower or upper case) replaced by '{p}'.",
           "return ''.join('{p}' if c.lower() in 'aeiou' else c for c in text)",
           ("'Programming'", "''", "'AEIOU aeiou'", "'rhythm'", "'Out of office'")),
    Family("running_{p}", ("sum", "max", "min", "product"), "(numbers: list[int]) -> list[int]",
           "Return the running {p} of numbers: item i is the {p} of numbers[0] to numbers[i].",
           "from itertools import accumulate\nimport operator\n"
           "step = {{'sum': operator.add, 'max': max, 'min': min, 'product': operator.mul}}['{p}']\n"
           "return list(accumulate(numbers, step))",
           ("[1, 2, 3, 4]", "[]", "[3, -1, 4, -1, 5]", "[7]", "[2, 2, 0, 9, -3]")),
    Family("top_{p}_largest", (1, 2, 3, 4, 5), "(numbers: list[int]) -> list[int]",
           "Return the {p} largest numbers in descending order (all of them, sorted, if there are fewer).",
           "return sorted(numbers, reverse=True)[:{p}]",
           ("[5, 1, 9, 3, 7, 2]", "[]", "[4, 4, 4, 1]", "[-1, -5, -3]", "list(range(20))")),
    Family("to_base_{p}", (2, 3, 4, 5, 6, 7, 8, 9), "(n: int) -> str",
           "Return the non-negative number n written in base {p}, most significant digit first ('0' for 0).",
           "if n == 0:\n    return '0'\ndigits = ''\nwhile n:\n    n, digit = divmod(n, {p})\n"
           "    digits = str(digit) + digits\nreturn digits",
           ("10", "0", "255", "1", "2024", "{p}")),
)


@loaded_once
def train_problems() -> Mapping[str, Problem]:
    """Every problem of the train split, by task id."""
    built = (family.build(param) for family in FAMILIES for param in family.params)
    return {problem.task_id: problem for problem in built}


def train_ids() -> tuple[str, ...]:
    """The train split's task ids, without building the problems."""
    return tuple(f"train/{family.problem_name(param)}" for family in FAMILIES for param in family.params)
