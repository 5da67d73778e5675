"""Procedural company financials: income statement, balance sheet, cash flow, notes.

The three statements are generated consistently (gross profit = revenue - cost of
revenue, equity = assets - liabilities, net change in cash = CFO + CFI + CFF, ...)
over several fiscal years, in whole units of thousands or millions of USD, and
rendered as pipe tables with negatives in parentheses, as annual reports print them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from polyrl.domains.finance.answer import format_number

NAMES = ["Arden", "Bellwether", "Cobalt", "Dunmore", "Elstree", "Fairhaven", "Granite",
         "Halcyon", "Ironbark", "Juniper", "Kestrel", "Larkspur", "Meridian", "Northgate"]
SUFFIXES = ["Holdings", "Industries", "Systems", "Group", "Technologies", "Foods", "Logistics"]


@dataclass
class Company:
    """One company's statements.

    Attributes:
        name: company name.
        years: fiscal years, oldest first, (n_years,).
        unit: "thousand" or "million" (every statement value is in this unit).
        income, balance, cashflow: line item -> values per year, (n_years,) each,
            in statement order.
        notes: narrative paragraphs.
        facts: narrative figures by key (e.g. ``employees_<year>``), not in ``unit``.
    """

    name: str
    years: list[int]
    unit: str
    income: dict[str, list[int]] = field(default_factory=dict)
    balance: dict[str, list[int]] = field(default_factory=dict)
    cashflow: dict[str, list[int]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    facts: dict[str, int] = field(default_factory=dict)

    def value(self, item: str, year: int) -> int:
        """The value of line ``item`` in ``year`` (any statement)."""
        for table in (self.income, self.balance, self.cashflow):
            if item in table:
                return table[item][self.years.index(year)]
        raise KeyError(item)


def make_company(rng: random.Random, n_years: int = 3, unit: str | None = None,
                 scale: int = 1000, name: str | None = None) -> Company:
    """Draw a consistent set of statements for ``n_years`` fiscal years.

    Args:
        scale: rough size of revenue in ``unit`` (e.g. 1000 -> revenue ~ 1,000).
    """
    first = rng.randint(2012, 2020)
    years = list(range(first, first + n_years))
    c = Company(name or f"{rng.choice(NAMES)} {rng.choice(SUFFIXES)}", years,
                unit or rng.choice(["thousand", "million"]))
    rev = rng.uniform(0.5, 2.0) * scale
    cogs_pct, rnd_pct, sga_pct = rng.uniform(.35, .7), rng.uniform(.03, .12), rng.uniform(.08, .2)
    debt = rng.uniform(0.1, 0.6) * scale
    equity0 = rng.uniform(0.4, 1.2) * scale
    cash = rng.uniform(0.05, 0.3) * scale
    inc: dict[str, list[int]] = {k: [] for k in (
        "Revenue", "Cost of revenue", "Gross profit", "Research and development",
        "Selling, general and administrative", "Operating income", "Interest expense",
        "Income before income taxes", "Income tax expense", "Net income")}
    bal: dict[str, list[int]] = {k: [] for k in (
        "Cash and cash equivalents", "Accounts receivable", "Inventories",
        "Total current assets", "Property and equipment, net", "Total assets",
        "Accounts payable", "Short-term debt", "Total current liabilities", "Long-term debt",
        "Total liabilities", "Total shareholders' equity", "Total liabilities and equity")}
    cf: dict[str, list[int]] = {k: [] for k in (
        "Net income", "Depreciation and amortization", "Change in working capital",
        "Net cash from operating activities", "Capital expenditures",
        "Net cash used in investing activities", "Dividends paid", "Net change in debt",
        "Net cash from financing activities", "Net change in cash")}
    equity = equity0
    for k, _year in enumerate(years):
        if k:
            rev *= 1 + rng.uniform(-0.15, 0.3)
        r = round(rev)
        cogs = round(r * cogs_pct * rng.uniform(.95, 1.05))
        rnd, sga = round(r * rnd_pct), round(r * sga_pct)
        op = r - cogs - rnd - sga
        interest = round(debt * rng.uniform(0.03, 0.07))
        pretax = op - interest
        tax = round(max(0, pretax) * 0.21)
        net = pretax - tax
        for key, v in zip(inc, (r, cogs, r - cogs, rnd, sga, op, interest, pretax, tax, net),
                          strict=True):
            inc[key].append(v)
        da = round(r * rng.uniform(.03, .08))
        wc = round(r * rng.uniform(-.06, .04))
        cfo = net + da + wc
        capex = -round(r * rng.uniform(.04, .12))
        cfi = capex + round(r * rng.uniform(-.02, .01))
        div = -round(max(0, net) * rng.uniform(0, .4))
        ddebt = round(debt * rng.uniform(-.2, .2))
        debt += ddebt
        cff = div + ddebt
        change = cfo + cfi + cff
        cash = max(1.0, cash + change)
        for key, v in zip(cf, (net, da, wc, cfo, capex, cfi, div, ddebt, cff, change), strict=True):
            cf[key].append(v)
        equity += net + div
        ar, inv = round(r * rng.uniform(.08, .18)), round(r * rng.uniform(.05, .15))
        tca = round(cash) + ar + inv
        ppe = round(r * rng.uniform(.3, .8))
        ta = tca + ppe
        ap = round(r * rng.uniform(.05, .12))
        std = round(debt * .2)
        tcl = ap + std
        ltd = max(0, ta - round(equity) - tcl)  # equity is the plug: assets = L + E
        tl = tcl + ltd
        te = ta - tl
        for key, v in zip(bal, (round(cash), ar, inv, tca, ppe, ta, ap, std, tcl, ltd, tl, te,
                                ta), strict=True):
            bal[key].append(v)
    c.income, c.balance, c.cashflow = inc, bal, cf
    for y in years:
        c.facts[f"employees_{y}"] = rng.randint(50, 9000)
    c.notes = [
        f"{c.name} reports in {c.unit}s of US dollars except per-employee figures. "
        f"The company had {c.facts[f'employees_{years[-1]}']:,} employees at the end of "
        f"fiscal {years[-1]}, compared with {c.facts[f'employees_{years[0]}']:,} at the end "
        f"of fiscal {years[0]}.",
        "Capital expenditures consisted mainly of manufacturing equipment and software. "
        "Negative amounts are shown in parentheses.",
    ]
    return c


def cell(v: int) -> str:
    """A statement cell: ``1,234`` or ``(1,234)`` for negatives."""
    return f"({format_number(-v, 0)})" if v < 0 else format_number(v, 0)


def render_table(title: str, c: Company, table: dict[str, list[int]]) -> str:
    """One statement as a pipe table, years as columns."""
    head = f"{title} (in {c.unit}s of USD)\n | " + " | ".join(str(y) for y in c.years)
    rows = [f"{item} | " + " | ".join(cell(v) for v in vals) for item, vals in table.items()]
    return "\n".join([head, *rows])


def render(c: Company, which: tuple[str, ...] = ("income", "balance", "cashflow")) -> str:
    """The company's report: the chosen statements, then its notes."""
    titles = {"income": "Consolidated Statements of Operations",
              "balance": "Consolidated Balance Sheets",
              "cashflow": "Consolidated Statements of Cash Flows"}
    parts = [f"{c.name} - Annual Report"]
    parts += [render_table(titles[w], c, getattr(c, w)) for w in which]
    parts += ["Notes", *c.notes]
    return "\n\n".join(parts)
