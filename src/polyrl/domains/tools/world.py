"""The shop world of ``tools/episodes-v1``: data, tool specs, tool code and questions.

A world is JSON data (products, customers, orders, tier discounts). The tools are
deterministic Python functions (``TOOL_SOURCE``) executed in the sandbox with the
world and the call on stdin; they print one JSON result. Questions, by difficulty:

1. the price of one product (1 call);
2. the name of the customer of an order (2 calls);
3. the total of an order (1 + items calls);
4. the total of an order after the customer's tier discount (3 + items calls);
5. the sum of the discounted totals of two orders (up to ~12 calls).
Money answers are in dollars, rounded to cents.
"""

from __future__ import annotations

import random
from typing import Any

from polyrl.domains.tools.intents import NAMES, WORDS_PRODUCTS

SURNAMES = ["Abe", "Banda", "Costa", "Dubois", "Eze", "Fischer", "Garcia", "Hill", "Ito",
            "Jensen", "Kim", "Lopez", "Moreau", "Novak", "Okafor", "Patel"]

TOOL_SOURCE = r'''
import json, sys
req = json.loads(sys.stdin.read())
w, name, a = req["world"], req["name"], req["arguments"]

def get_product(sku):
    p = w["products"].get(sku)
    return {"error": f"no product {sku}"} if p is None else p

def get_order(order_id):
    o = w["orders"].get(str(order_id))
    return {"error": f"no order {order_id}"} if o is None else o

def get_customer(customer_id):
    c = w["customers"].get(str(customer_id))
    return {"error": f"no customer {customer_id}"} if c is None else c

def get_discount(tier):
    if tier not in w["discounts"]:
        return {"error": f"no tier {tier}"}
    return {"tier": tier, "percent": w["discounts"][tier]}

fns = {"get_product": get_product, "get_order": get_order, "get_customer": get_customer,
       "get_discount": get_discount}
print(json.dumps(fns[name](**a), sort_keys=True))
'''

_P = {"type": "object", "additionalProperties": False}
TOOL_SPECS = [
    {"name": "get_product", "description": "product by SKU: name, price (USD), stock",
     "parameters": {**_P, "properties": {"sku": {"type": "string"}}, "required": ["sku"]}},
    {"name": "get_order", "description": "order by id: customer_id and items [{sku, qty}]",
     "parameters": {**_P, "properties": {"order_id": {"type": "integer"}},
                    "required": ["order_id"]}},
    {"name": "get_customer", "description": "customer by id: name and tier",
     "parameters": {**_P, "properties": {"customer_id": {"type": "integer"}},
                    "required": ["customer_id"]}},
    {"name": "get_discount", "description": "discount percent of a customer tier",
     "parameters": {**_P, "properties": {"tier": {"type": "string"}}, "required": ["tier"]}},
]


def make_world(rng: random.Random) -> dict[str, Any]:
    """A small random shop (JSON-safe)."""
    skus = [f"SKU-{rng.randint(100, 999)}{c}" for c in "ABCDEFGH"]
    products = {s: {"name": n, "price": rng.randint(100, 9999) / 100, "stock": rng.randint(0, 50)}
                for s, n in zip(skus, rng.sample(WORDS_PRODUCTS, len(skus)), strict=True)}
    tiers = {"bronze": rng.choice([0, 5]), "silver": rng.choice([10, 15]),
             "gold": rng.choice([20, 25])}
    cids = rng.sample(range(10, 99), 5)
    # first name and surname: from 8 first names alone, one fixed name answered 1 in 8
    # of the "who placed order X" questions without a single tool call
    people = [f"{n.capitalize()} {s}" for n in NAMES for s in SURNAMES]
    customers = {str(c): {"name": n, "tier": rng.choice(sorted(tiers))}
                 for c, n in zip(cids, rng.sample(people, 5), strict=True)}
    orders = {}
    for oid in rng.sample(range(1000, 9999), 6):
        items = [{"sku": s, "qty": rng.randint(1, 4)} for s in rng.sample(skus, rng.randint(1, 3))]
        orders[str(oid)] = {"customer_id": rng.choice(cids), "items": items}
    return {"products": products, "customers": customers, "orders": orders, "discounts": tiers}


def _cents(world: dict[str, Any], oid: str, discounted: bool) -> tuple[int, list[tuple]]:
    order = world["orders"][oid]
    calls: list[tuple] = [("get_order", {"order_id": int(oid)})]
    total = 0
    for it in order["items"]:
        calls.append(("get_product", {"sku": it["sku"]}))
        total += round(world["products"][it["sku"]]["price"] * 100) * it["qty"]
    if discounted:
        cust = world["customers"][str(order["customer_id"])]
        calls += [("get_customer", {"customer_id": order["customer_id"]}),
                  ("get_discount", {"tier": cust["tier"]})]
        total = total * (100 - world["discounts"][cust["tier"]])  # cents * 100
        return total, calls
    return total * 100, calls


def make_question(rng: random.Random, world: dict[str, Any],
                  difficulty: int) -> tuple[str, str, list[tuple]]:
    """``(question, answer_text, oracle_calls)``; calls are ``(name, arguments)``."""
    oids = sorted(world["orders"])
    if difficulty == 1:
        sku = rng.choice(sorted(world["products"]))
        return (f"What is the price in USD of product {sku}?",
                f"{world['products'][sku]['price']:.2f}", [("get_product", {"sku": sku})])
    oid = rng.choice(oids)
    if difficulty == 2:
        cid = world["orders"][oid]["customer_id"]
        return (f"What is the name of the customer who placed order {oid}?",
                world["customers"][str(cid)]["name"],
                [("get_order", {"order_id": int(oid)}), ("get_customer", {"customer_id": cid})])
    if difficulty in (3, 4):
        total, calls = _cents(world, oid, difficulty == 4)
        what = "after the customer's tier discount" if difficulty == 4 else "before any discount"
        return (f"What is the total price in USD of order {oid} (price x qty summed) {what}? "
                f"Round to cents.", f"{total / 10000:.2f}", calls)
    if difficulty == 5:
        a, b = rng.sample(oids, 2)
        ta, ca = _cents(world, a, True)
        tb, cb = _cents(world, b, True)
        seen, calls = set(), []
        for c in ca + cb:
            key = (c[0], tuple(sorted(c[1].items())))
            if key not in seen:
                seen.add(key)
                calls.append(c)
        return (f"What do orders {a} and {b} cost together in USD, each after its customer's "
                f"tier discount? Round to cents.", f"{(ta + tb) / 10000:.2f}", calls)
    raise ValueError(f"difficulty must be in 1..5, got {difficulty}")
