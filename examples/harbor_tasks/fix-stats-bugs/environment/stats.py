"""Small statistics helpers."""


def mean(values):
    if not values:
        raise ValueError("mean of an empty list")
    return sum(values) // len(values)


def median(values):
    if not values:
        raise ValueError("median of an empty list")
    middle = len(values) // 2
    return values[middle]
