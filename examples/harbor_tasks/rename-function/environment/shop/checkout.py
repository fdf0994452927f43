"""Checks out a sample cart."""

from shop.cart import calc_total

CART = [(10.0, 2), (3.5, 1)]

if __name__ == "__main__":
    print(f"total: {calc_total(CART):.2f}")
