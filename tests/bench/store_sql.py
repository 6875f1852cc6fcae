#!/usr/bin/env python3
"""store_sql.py — the text of a named statement of libax/src/store, as the
store sends it (AX_STMT(ident, "name", sql...), its macros expanded by the C
preprocessor), for the benchmark scripts that EXPLAIN the store's statements
(tests/bench/explain_executor.sh, explain_leader.sh): they read the text from
the source instead of carrying a copy that drifts.

    tests/bench/store_sql.py run.claim [dispatch.due_mark ...]

Prints each statement's text on one line, in the order asked. Exits 1 naming
the statement when one is not found (renamed or removed: the script asking
for it must be brought in step), 2 when the preprocessor fails."""
import glob
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
LIT = re.compile(r'"((?:[^"\\\n]|\\.)*)"')
STMT = re.compile(r'\.name\s*=\s*\(\s*"([^"]*)"\s*\)\s*,\s*\.sql\s*=\s*\(')


def pg_include():
    try:
        return subprocess.run(["pg_config", "--includedir"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "/usr/include/postgresql"


def preprocess(path):
    cc = os.environ.get("CC") or shutil.which("cc") or "gcc"
    inc = [os.path.join(ROOT, "libax", "include"), os.path.join(ROOT, "libax", "src"), pg_include()]
    inc += glob.glob(os.path.join(ROOT, "build", "*", "libax", "core_include"))[:1]
    cmd = [cc, "-E", "-P"] + ["-I" + d for d in inc] + [path]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write("store_sql.py: %s failed:\n%s" % (" ".join(cmd), r.stderr))
        sys.exit(2)
    return r.stdout


def unescape(s):
    return s.encode("latin-1", "backslashreplace").decode("unicode_escape")


def statements():
    out = {}
    for path in sorted(glob.glob(os.path.join(ROOT, "libax", "src", "store", "*.c"))):
        text = preprocess(path)
        for m in STMT.finditer(text):
            pos, parts = m.end(), []
            while True:
                while text[pos].isspace():
                    pos += 1
                lit = LIT.match(text, pos)
                if not lit:
                    break
                parts.append(unescape(lit.group(1)))
                pos = lit.end()
            out[m.group(1)] = "".join(parts)
    return out


def main():
    if len(sys.argv) < 2:
        sys.stderr.write("usage: store_sql.py NAME...\n")
        return 2
    have = statements()
    for name in sys.argv[1:]:
        if name not in have:
            sys.stderr.write("store_sql.py: no statement named %s in libax/src/store/*.c "
                             "(renamed or removed? bring the script in step)\n" % name)
            return 1
        print(" ".join(have[name].split()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
