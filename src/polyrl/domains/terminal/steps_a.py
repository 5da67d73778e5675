"""Step generators for generated shell tasks: files, text, scripts, archives.

A ``Step`` is one requirement of a task: an instruction line, its share of the
setup and of the oracle solution (bash), and one check (a Python expression over
the helpers of ``gen.CHECK_PRELUDE``) that is False before the step is done.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

WORDS = ["alpha", "bravo", "cobalt", "delta", "ember", "fjord", "garnet", "harbor", "iris",
         "jade", "krypton", "lumen", "maple", "nectar", "onyx", "pixel", "quartz", "raven"]


@dataclass(frozen=True)
class Step:
    """One requirement: ``instruction``, ``setup`` and ``solution`` bash, ``check`` expr."""

    name: str
    instruction: str
    setup: str
    solution: str
    check: str


StepFn = Callable[[random.Random], Step]


def _w(rng: random.Random) -> str:
    return rng.choice(WORDS)


# ----------------------------------------------------------------------- files
def f_note(rng: random.Random) -> Step:
    """Step: Create the file ... (and its folders) containing the ..."""
    a, b, text = _w(rng), _w(rng), f"{_w(rng)} {rng.randint(10, 99)}"
    path = f"proj/{a}/{b}/notes.txt"
    return Step("note", f"Create the file {path} (and its folders) containing the single line "
                f"'{text}'.", "", f"mkdir -p proj/{a}/{b} && echo '{text}' > {path}",
                f"read({path!r}) == {text + chr(10)!r}")


def f_private(rng: random.Random) -> Step:
    """Step: Make ... readable and writable by its owner only ..."""
    k = rng.randint(1, 99)
    path = f"data/secret_{k}.txt"
    return Step("private", f"Make {path} readable and writable by its owner only (mode 600).",
                f"mkdir -p data && echo s{k} > {path} && chmod 644 {path}",
                f"chmod 600 {path}", f"mode({path!r}) == 0o600")


def f_exec(rng: random.Random) -> Step:
    """Step: Make ... executable (mode 755)."""
    name = f"bin/run_{_w(rng)}.sh"
    return Step("exec", f"Make {name} executable (mode 755).",
                f"mkdir -p bin && printf '#!/bin/sh\\necho hi\\n' > {name} && chmod 644 {name}",
                f"chmod 755 {name}", f"mode({name!r}) == 0o755")


def f_link(rng: random.Random) -> Step:
    """Step: Create a symbolic link named 'latest' in /workspace pointing ..."""
    vs = sorted(rng.sample(range(1, 20), 3))
    setup = " && ".join(f"mkdir -p releases/v{v}" for v in vs)
    return Step("link", f"Create a symbolic link named 'latest' in /workspace pointing to the "
                f"relative path releases/v{vs[-1]} (the highest version in releases/).", setup,
                f"ln -sfn releases/v{vs[-1]} latest",
                f"os.path.islink('latest') and os.readlink('latest').rstrip('/') == "
                f"'releases/v{vs[-1]}'")


def f_clean(rng: random.Random) -> Step:
    """Step: Delete every *.tmp file under cache/ (recursively); keep all ..."""
    n = rng.randint(2, 5)
    setup = "mkdir -p cache/sub && " + " && ".join(
        f"touch cache/f{i}.tmp cache/sub/g{i}.tmp cache/keep{i}.dat" for i in range(n))
    return Step("clean", "Delete every *.tmp file under cache/ (recursively); keep all other "
                "files.", setup, "find cache -name '*.tmp' -type f -delete",
                f"not sh('find cache -name \"*.tmp\"').strip() and "
                f"len(glob.glob('cache/keep*.dat')) == {n}")


def f_rename(rng: random.Random) -> Step:
    """Step: Rename every .txt file in docs/ to the same ..."""
    names = rng.sample(WORDS, 3)
    setup = "mkdir -p docs && " + " && ".join(f"echo {n} > docs/{n}.txt" for n in names)
    return Step("rename", "Rename every .txt file in docs/ to the same name with extension .md.",
                setup, 'for f in docs/*.txt; do mv "$f" "${f%.txt}.md"; done',
                f"sorted(os.listdir('docs')) == {sorted(n + '.md' for n in names)!r}")


# ------------------------------------------------------------------------ text
def _log(rng: random.Random) -> tuple[str, list[tuple[str, str, str]]]:
    rows = []
    for i in range(rng.randint(15, 30)):
        level = rng.choice(["INFO", "INFO", "WARN", "ERROR"])
        ip = f"10.0.{rng.randint(0, 3)}.{rng.randint(1, 9)}"
        rows.append((f"2024-05-{1 + i % 28:02d}", level, ip))
    if not any(r[1] == "ERROR" for r in rows):
        rows[0] = (rows[0][0], "ERROR", rows[0][2])
    if not any(r[1] == "WARN" for r in rows):
        rows[1] = (rows[1][0], "WARN", rows[1][2])
    text = "".join(f"{d} {lv} client={ip} msg={lv.lower()}\n" for d, lv, ip in rows)
    return text, rows


def _write(path: str, text: str) -> str:
    return f"cat > {path} <<'POLYRL_EOF'\n{text}POLYRL_EOF"


def t_errors(rng: random.Random) -> Step:
    """Step: Write the number of lines of app.log that contain ..."""
    text, rows = _log(rng)
    n = sum(1 for r in rows if r[1] == "ERROR")
    return Step("errors", "Write the number of lines of app.log that contain ERROR to "
                "error_count.txt (just the number).", _write("app.log", text),
                "grep -c ERROR app.log > error_count.txt",
                f"read('error_count.txt').strip() == '{n}'")


def t_ips(rng: random.Random) -> Step:
    """Step: Write the distinct client IP addresses of access.log (the ..."""
    text, rows = _log(rng)
    ips = sorted({r[2] for r in rows})
    return Step("ips", "Write the distinct client IP addresses of access.log (the value after "
                "'client='), sorted, one per line, to ips.txt.", _write("access.log", text),
                "grep -o 'client=[0-9.]*' access.log | cut -d= -f2 | sort -u > ips.txt",
                f"read('ips.txt').split() == {ips!r}")


def t_config(rng: random.Random) -> Step:
    """Step: In config.ini change the line mode=debug to mode=release; change."""
    port = rng.randint(1025, 9000)
    text = f"[server]\nmode=debug\nport={port}\nverbose=debug_level\n"
    want = text.replace("mode=debug", "mode=release")
    return Step("config", "In config.ini change the line mode=debug to mode=release; change "
                "nothing else.", _write("config.ini", text),
                "sed -i 's/^mode=debug$/mode=release/' config.ini",
                f"read('config.ini') == {want!r}")


def t_sum(rng: random.Random) -> Step:
    """Step: table.txt has three whitespace-separated columns; write the sum of ..."""
    rows = [(_w(rng), rng.randint(1, 50), rng.randint(1, 500)) for _ in range(rng.randint(5, 12))]
    text = "".join(f"{a} {b} {c}\n" for a, b, c in rows)
    total = sum(r[2] for r in rows)
    return Step("sum", "table.txt has three whitespace-separated columns; write the sum of the "
                "third column to col3_sum.txt.", _write("table.txt", text),
                "awk '{s+=$3} END {print s}' table.txt > col3_sum.txt",
                f"read('col3_sum.txt').strip() == '{total}'")


def t_sort(rng: random.Random) -> Step:
    """Step: Write the lines of names.txt sorted alphabetically with duplicates."""
    names = [rng.choice(WORDS) for _ in range(12)]
    want = sorted(set(names))
    return Step("sort", "Write the lines of names.txt sorted alphabetically with duplicates "
                "removed to sorted.txt.", _write("names.txt", "\n".join(names) + "\n"),
                "sort -u names.txt > sorted.txt", f"read('sorted.txt').split() == {want!r}")


def t_warn(rng: random.Random) -> Step:
    """Step: Write the first two lines of server.log that contain ..."""
    text, _ = _log(rng)
    want = [ln for ln in text.splitlines() if "WARN" in ln][:2]
    return Step("warn", "Write the first two lines of server.log that contain WARN to "
                "warn_head.txt.", _write("server.log", text),
                "grep WARN server.log | head -n 2 > warn_head.txt",
                f"read('warn_head.txt').splitlines() == {want!r}")


# --------------------------------------------------------------------- scripts
def s_hello(rng: random.Random) -> Step:
    """Step: Write an executable script greet.sh that prints 'Hello, NAME!' ..."""
    who = _w(rng)
    return Step("hello", "Write an executable script greet.sh that prints 'Hello, NAME!' for its "
                "first argument NAME.", "",
                "printf '#!/bin/bash\\necho \"Hello, $1!\"\\n' > greet.sh && chmod +x greet.sh",
                f"sh('./greet.sh {who}') == 'Hello, {who}!\\n'")


def s_sum(rng: random.Random) -> Step:
    """Step: Write an executable script sum.sh that prints the sum ..."""
    nums = [rng.randint(-20, 99) for _ in range(4)]
    return Step("sumargs", "Write an executable script sum.sh that prints the sum of its integer "
                "arguments.", "",
                "printf '#!/bin/bash\\ns=0\\nfor x in \"$@\"; do s=$((s+x)); done\\necho $s\\n' "
                "> sum.sh && chmod +x sum.sh",
                f"sh('./sum.sh {' '.join(map(str, nums))}').strip() == '{sum(nums)}'")


def s_count(rng: random.Random) -> Step:
    """Step: Write a Python script count.py that prints the number ..."""
    n = rng.randint(3, 9)
    return Step("count", "Write a Python script count.py that prints the number of lines of the "
                "file given as its first argument.", "",
                "printf 'import sys\\nprint(len(open(sys.argv[1]).read().splitlines()))\\n' "
                "> count.py",
                f"open('/tmp/c.txt', 'w').write('x\\n' * {n}) and "
                f"sh('python3 count.py /tmp/c.txt').strip() == '{n}'")


def s_rev(rng: random.Random) -> Step:
    """Step: Write an executable script rev.sh that prints the lines ..."""
    words = rng.sample(WORDS, 3)
    return Step("rev", "Write an executable script rev.sh that prints the lines of its standard "
                "input in reverse order.", "",
                "printf '#!/bin/bash\\ntac\\n' > rev.sh && chmod +x rev.sh",
                f"pipe('./rev.sh', {chr(10).join(words) + chr(10)!r}).split() == "
                f"{list(reversed(words))!r}")


def s_upper(rng: random.Random) -> Step:
    """Step: Write an executable script upper.sh that prints its standard ..."""
    word = _w(rng)
    return Step("upper", "Write an executable script upper.sh that prints its standard input "
                "converted to upper case.", "",
                "printf '#!/bin/bash\\ntr a-z A-Z\\n' > upper.sh && chmod +x upper.sh",
                f"pipe('./upper.sh', '{word} 1\\n') == '{word.upper()} 1\\n'")


# -------------------------------------------------------------------- archives
def a_backup(rng: random.Random) -> Step:
    """Step: Create backup.tar.gz, a gzip-compressed tar archive of the folder."""
    page = _w(rng)
    return Step("backup", "Create backup.tar.gz, a gzip-compressed tar archive of the folder "
                "site/ (members named site/...).",
                f"mkdir -p site/css && echo {page} > site/index.html && echo x > site/css/a.css",
                "tar czf backup.tar.gz site",
                "'site/index.html' in tarfile.open('backup.tar.gz', 'r:gz').getnames()")


def a_extract(rng: random.Random) -> Step:
    """Step: Extract bundle.tar into the folder out/ (create it)."""
    token = f"{_w(rng)}-{rng.randint(100, 999)}"
    return Step("extract", "Extract bundle.tar into the folder out/ (create it).",
                f"mkdir -p /tmp/b/pkg && echo {token} > /tmp/b/pkg/VERSION && "
                "tar cf bundle.tar -C /tmp/b pkg",
                "mkdir -p out && tar xf bundle.tar -C out",
                f"read('out/pkg/VERSION').strip() == '{token}'")


def a_zip(rng: random.Random) -> Step:
    """Step: Create logs.zip containing only the .log files of logs/, ..."""
    names = rng.sample(WORDS, 3)
    setup = "mkdir -p logs && " + " && ".join(f"echo {n} > logs/{n}.log" for n in names) + \
        " && echo no > logs/readme.txt"
    want = sorted(f"{n}.log" for n in names)
    return Step("zip", "Create logs.zip containing only the .log files of logs/, stored without "
                "folder names (e.g. a.log, not logs/a.log).", setup,
                "zip -j -q logs.zip logs/*.log",
                f"sorted(zipfile.ZipFile('logs.zip').namelist()) == {want!r}")


def a_find(rng: random.Random) -> Step:
    """Step: nested.tar.gz holds several text files; write the base name ..."""
    names = rng.sample(WORDS, 4)
    token = f"TOKEN{rng.randint(1000, 9999)}"
    hit = rng.choice(names)
    setup = "mkdir -p /tmp/n/parts && " + " && ".join(
        f"echo {token if n == hit else 'nothing'} > /tmp/n/parts/{n}.txt" for n in names) + \
        " && tar czf nested.tar.gz -C /tmp/n parts"
    return Step("find", f"nested.tar.gz holds several text files; write the base name (e.g. "
                f"x.txt) of the one that contains {token} to found.txt.", setup,
                f"mkdir -p /tmp/x && tar xzf nested.tar.gz -C /tmp/x && "
                f"basename $(grep -rl {token} /tmp/x) > found.txt",
                f"read('found.txt').strip() == '{hit}.txt'")


def a_gzip(rng: random.Random) -> Step:
    """Step: Compress big.txt to big.txt.gz with gzip, keeping big.txt."""
    n = rng.randint(50, 200)
    return Step("gzip", "Compress big.txt to big.txt.gz with gzip, keeping big.txt.",
                f"seq 1 {n} > big.txt", "gzip -k big.txt",
                "os.path.exists('big.txt') and gzip.open('big.txt.gz').read() == "
                "read('big.txt').encode()")


FILES = [f_note, f_private, f_exec, f_link, f_clean, f_rename]
TEXT = [t_errors, t_ips, t_config, t_sum, t_sort, t_warn]
SCRIPTS = [s_hello, s_sum, s_count, s_rev, s_upper]
ARCHIVES = [a_backup, a_extract, a_zip, a_find, a_gzip]
