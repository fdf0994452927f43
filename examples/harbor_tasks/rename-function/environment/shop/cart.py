"""Cart prices."""


def calc_total(items, discount=0.0):
    """Sum of price * quantity, less a fractional discount."""
    subtotal = sum(price * quantity for price, quantity in items)
    return round(subtotal * (1 - discount), 2)


def calc_totals_report(carts):
    """One line per cart."""
    return [f"{name}: {calc_total(items):.2f}" for name, items in carts.items()]
