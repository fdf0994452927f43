"""Checks /app/stats.py with the standard library's unittest."""

import sys
import unittest

sys.path.insert(0, "/app")

import stats  # noqa: E402


class MeanTest(unittest.TestCase):
    def test_fractional(self):
        self.assertEqual(stats.mean([1, 2, 3, 4]), 2.5)

    def test_negative(self):
        self.assertAlmostEqual(stats.mean([-1.5, 0.5]), -0.5)

    def test_empty(self):
        with self.assertRaises(ValueError):
            stats.mean([])


class MedianTest(unittest.TestCase):
    def test_odd_unsorted(self):
        self.assertEqual(stats.median([3, 1, 2]), 2)

    def test_even_unsorted(self):
        self.assertEqual(stats.median([4, 1, 3, 2]), 2.5)

    def test_input_left_alone(self):
        values = [5, 3, 9]
        stats.median(values)
        self.assertEqual(values, [5, 3, 9])

    def test_empty(self):
        with self.assertRaises(ValueError):
            stats.median([])


if __name__ == "__main__":
    unittest.main()
