"""Step generators for generated shell tasks: git, data wrangling (csv/json), debugging.

Git steps share one repository made by ``GIT_SETUP`` (repo/ with one commit and a
repo-local identity, since $HOME does not persist in the sandbox).
"""

from __future__ import annotations

import json
import random

from polyrl.domains.terminal.steps_a import WORDS, Step, _w, _write

GIT_SETUP = (
    "git init -q -b main repo && cd repo && git config user.name polyrl && "
    "git config user.email polyrl@example.com && echo v1 > app.txt && git add app.txt && "
    "git commit -q -m init && cd .."
)


def _git(step: str, setup: str = "") -> str:
    return f"[ -d repo ] || ({GIT_SETUP})" + (f" && {setup}" if setup else "")


# ------------------------------------------------------------------------- git
def g_commit(rng: random.Random) -> Step:
    """Step: In the git repository repo/, add a file notes/....txt ..."""
    x = _w(rng)
    return Step("commit", f"In the git repository repo/, add a file notes/{x}.txt containing "
                f"'{x}' and commit it with the message 'add {x}'.", _git("commit"),
                f"cd repo && mkdir -p notes && echo {x} > notes/{x}.txt && "
                f"git add notes && git commit -q -m 'add {x}' && cd ..",
                f"sh('git -C repo log --format=%s -- notes/{x}.txt').strip() == 'add {x}' and "
                f"sh('git -C repo show HEAD:notes/{x}.txt').strip() == '{x}'")


def g_branch(rng: random.Random) -> Step:
    """Step: In repo/, create a branch named feature/... (staying on ..."""
    y = _w(rng)
    return Step("branch", f"In repo/, create a branch named feature/{y} (staying on main is fine).",
                _git("branch"), f"git -C repo branch feature/{y}",
                f"'feature/{y}' in sh(\"git -C repo branch --format='%(refname:short)'\").split()")


def g_tag(rng: random.Random) -> Step:
    """Step: In repo/, create a tag v....0 on the first ..."""
    n = rng.randint(1, 9)
    return Step("tag", f"In repo/, create a tag v{n}.0 on the first commit (message 'init').",
                _git("tag"), f"git -C repo tag v{n}.0 $(git -C repo rev-list --max-parents=0 HEAD)",
                f"sh('git -C repo rev-list --max-parents=0 HEAD').strip() != '' and "
                f"sh('git -C repo rev-parse v{n}.0^{{commit}}') == "
                f"sh('git -C repo rev-list --max-parents=0 HEAD')")


def g_ignore(rng: random.Random) -> Step:
    """Step: In repo/, commit a .gitignore that ignores *.... files."""
    ext = rng.choice(["log", "tmp", "bak", "cache"])
    return Step("ignore", f"In repo/, commit a .gitignore that ignores *.{ext} files.",
                _git("ignore"),
                f"cd repo && echo '*.{ext}' >> .gitignore && git add .gitignore && "
                f"git commit -q -m 'ignore {ext}' && cd ..",
                f"'*.{ext}' in sh('git -C repo show HEAD:.gitignore').split() or "
                f"'*.{ext}' in sh('git -C repo show main:.gitignore').split()")


def g_discard(rng: random.Random) -> Step:
    """Step: In repo/, app.txt has uncommitted edits; discard them so ..."""
    junk = _w(rng)
    return Step("discard", "In repo/, app.txt has uncommitted edits; discard them so it matches "
                "the last commit.", _git("discard", f"echo {junk} >> repo/app.txt"),
                "git -C repo checkout -- app.txt",
                "read('repo/app.txt') == 'v1\\n' and not sh('git -C repo status --porcelain "
                "app.txt').strip()")


def g_config(rng: random.Random) -> Step:
    """Step: In repo/, set the repository-local git option pull.rebase to ..."""
    return Step("config", "In repo/, set the repository-local git option pull.rebase to true.",
                _git("config"), "git -C repo config pull.rebase true",
                "sh('git -C repo config --local pull.rebase').strip() == 'true'")


# ------------------------------------------------------------------------ data
def _sales(rng: random.Random, products: list[str] | None = None
           ) -> tuple[str, list[tuple[str, str, int]]]:
    """A sales.csv text and its rows ``(region, product, amount)``: 8-16 rows over the
    first 6 words, or with ``products`` a row for each of them and 3-8 more (shuffled)."""
    if products is None:
        rows = [(rng.choice(["north", "south", "east", "west"]), rng.choice(WORDS[:6]),
                 rng.randint(1, 400)) for _ in range(rng.randint(8, 16))]
    else:
        rows = [(rng.choice(["north", "south", "east", "west"]), p, rng.randint(1, 400))
                for p in products + [rng.choice(products) for _ in range(rng.randint(3, 8))]]
        rng.shuffle(rows)
    return "region,product,amount\n" + "".join(f"{a},{b},{c}\n" for a, b, c in rows), rows


def d_totals(rng: random.Random) -> Step:
    """Step: From sales.csv (header region,product,amount) write totals.json: a."""
    text, rows = _sales(rng)
    totals: dict[str, int] = {}
    for r, _, a in rows:
        totals[r] = totals.get(r, 0) + a
    return Step("totals", "From sales.csv (header region,product,amount) write totals.json: a "
                "JSON object mapping each region to its total amount (integers).",
                _write("sales.csv", text),
                "python3 -c \"import csv,json; t={}\n"
                "for r in csv.DictReader(open('sales.csv')): "
                "t[r['region']]=t.get(r['region'],0)+int(r['amount'])\n"
                "json.dump(t,open('totals.json','w'))\"",
                f"json.load(open('totals.json')) == {totals!r}")


def d_users(rng: random.Random) -> Step:
    """Step: Convert users.json (a list of ... objects) to users.csv ..."""
    users = [{"id": i, "name": n} for i, n in zip(rng.sample(range(1, 60), 5),
                                                   rng.sample(WORDS, 5), strict=True)]
    want = "id,name\n" + "".join(f"{u['id']},{u['name']}\n" for u in sorted(users,
                                                                           key=lambda u: u["id"]))
    return Step("users", "Convert users.json (a list of {id, name} objects) to users.csv with "
                "the header id,name and one row per user sorted by id (numerically).",
                _write("users.json", json.dumps(users) + "\n"),
                "jq -r '[\"id\",\"name\"], (sort_by(.id)[] | [.id, .name]) | @csv' users.json "
                "| tr -d '\"' > users.csv",
                f"read('users.csv').replace(chr(13), '') == {want!r}")


def d_big(rng: random.Random) -> Step:
    """Step: Write to big_sales.csv the header and the rows of ..."""
    text, rows = _sales(rng)
    cut = sorted(r[2] for r in rows)[len(rows) // 2]
    want = ["region,product,amount"] + [f"{a},{b},{c}" for a, b, c in rows if c > cut]
    return Step("big", f"Write to big_sales.csv the header and the rows of orders.csv whose "
                f"amount is greater than {cut}, in their original order.",
                _write("orders.csv", text),
                f"awk -F, 'NR==1 || $3 > {cut}' orders.csv > big_sales.csv",
                f"read('big_sales.csv').splitlines() == {want!r}")


def d_products(rng: random.Random) -> Step:
    """Step: Write the number of distinct products in stock.csv (header.

    The count is spread over 2..9 (from the 6 products of ``_sales`` it was 5 or 6 in 84%
    of tasks: ``echo 5 > products.txt`` passed 44% without reading the file)."""
    text, rows = _sales(rng, rng.sample(WORDS, rng.randint(2, 9)))
    n = len({r[1] for r in rows})
    return Step("products", "Write the number of distinct products in stock.csv (header "
                "region,product,amount) to products.txt.", _write("stock.csv", text),
                "tail -n +2 stock.csv | cut -d, -f2 | sort -u | wc -l > products.txt",
                f"read('products.txt').strip() == '{n}'")


def d_top(rng: random.Random) -> Step:
    """Step: Write the product of the row with the largest ..."""
    text, rows = _sales(rng)
    best = max(rows, key=lambda r: r[2])
    rows = [r for r in rows if r[2] != best[2] or r is best]
    text = "region,product,amount\n" + "".join(f"{a},{b},{c}\n" for a, b, c in rows)
    return Step("top", "Write the product of the row with the largest amount in ledger.csv "
                "(header region,product,amount) to top.txt.", _write("ledger.csv", text),
                "tail -n +2 ledger.csv | sort -t, -k3 -n | tail -n 1 | cut -d, -f2 > top.txt",
                f"read('top.txt').strip() == '{best[1]}'")


# ----------------------------------------------------------------------- debug
_BUGS = {
    "count": ("len(nums) - 1", "len(nums)"),
    "sum": ("sum(nums[1:])", "sum(nums)"),
    "min": ("max(nums)", "min(nums)"),
    "max": ("sorted(nums)[-2]", "max(nums)"),
    "mean": ("round(sum(nums) / (len(nums) + 1), 2)", "round(sum(nums) / len(nums), 2)"),
}


def stats_script(bugs: set[str]) -> str:
    """stats.py source with the named bugs (``_BUGS``) in place."""
    lines = ["import sys", "nums = [int(x) for x in open(sys.argv[1]).read().split()]"]
    for key, (bad, good) in _BUGS.items():
        lines.append(f"print('{key}=' + str({bad if key in bugs else good}))")
    return "\n".join(lines) + "\n"


def debug_steps(rng: random.Random, k: int) -> list[Step]:
    """``k`` bugs of stats.py to fix; the first step's setup writes the buggy script.

    A step passes when the script prints exactly one ``<key>=`` line and it is right
    (a script printing every candidate value, ``sum=0`` .. ``sum=4999``, passed them all).
    """
    keys = rng.sample(list(_BUGS), k)
    nums = rng.sample(range(1, 500), 9)
    good = {"count": len(nums), "sum": sum(nums), "min": min(nums), "max": max(nums),
            "mean": round(sum(nums) / len(nums), 2)}
    setup = _write("stats.py", stats_script(set(keys))) + "\n" + \
        _write("numbers.txt", "\n".join(map(str, nums)) + "\n")
    fixed = _write("stats.py", stats_script(set()))
    return [Step(f"bug_{key}", f"`python3 stats.py numbers.txt` must print the correct {key} of "
                 f"the numbers (line '{key}=...').", setup if i == 0 else "",
                 fixed if i == 0 else "",
                 f"[ln for ln in sh('python3 stats.py numbers.txt').splitlines() "
                 f"if ln.startswith('{key}=')] == ['{key}={good[key]}']")
            for i, key in enumerate(keys)]


GIT = [g_commit, g_branch, g_tag, g_ignore, g_discard, g_config]
DATA = [d_totals, d_users, d_big, d_products, d_top]
