#!/usr/bin/python3
"""Compile-only check of the mutation list: a mutant that does not build
proves nothing, and tools/mutants.sh only says NOBUILD when it runs one (one
rebuild and test run each). This applies every mutant of tools/mutants.d/
whose file is a translation unit to a scratch copy of that file, compiles
it alone with the build's own command (compile_commands.json, warnings as
errors), and prints each one that is STALE (its `find` text not exactly
once in the file) or does not compile, with the compiler's first line.
Mutants of headers, docs, scripts or CMake files are listed as not checked.

Usage: tools/mutants-compile.py [BUILD_DIR [LIST-FILE...]]   (default:
build, configured with -DKVTIER_WERROR=ON so the commands carry -Werror;
every list of tools/mutants.d)
Exit: 0 when every checked mutant compiles, 1 otherwise.

It edits files of the tree it runs in and restores each at once; run it on
a clean clone, not on a tree someone is editing."""
import glob
import json
import os
import shlex
import subprocess
import sys
import tempfile

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
build = os.path.join(root, sys.argv[1] if len(sys.argv) > 1 else "build")
db = os.path.join(build, "compile_commands.json")
if not os.path.exists(db):
    sys.exit(f"mutants-compile: no {db}: configure the build first (make configure)")
commands = {}
for entry in json.load(open(db)):
    commands.setdefault(os.path.relpath(entry["file"], root), entry)


def mutants(path):
    """(id, file, find, replace) of each entry of one list file."""
    for block in open(path).read().split("[mutant ")[1:]:
        lines = block.split("\n")
        fields = {}
        for line in lines[1:]:
            for key in ("file: ", "find: ", "replace:"):
                if line.startswith(key):
                    fields[key] = line[len(key):]
        replace = fields.get("replace:", "")
        yield lines[0].rstrip("]"), fields.get("file: "), fields.get("find: "), replace[
            1:] if replace.startswith(" ") else replace


bad = unchecked = checked = 0
obj = os.path.join(tempfile.mkdtemp(prefix="kvt-mc."), "m.o")
lists = sys.argv[2:] or sorted(glob.glob(os.path.join(root, "tools/mutants.d/*.txt")))
for listfile in lists:
    for mid, rel, find, replace in mutants(listfile):
        entry = commands.get(rel)
        if not rel or not find or not entry:
            unchecked += 1
            print(f"not checked {mid} ({rel}: not a translation unit)")
            continue
        path = os.path.join(root, rel)
        original = open(path).read()
        if original.count(find) != 1:
            bad += 1
            print(f"STALE   {mid} ({rel})")
            continue
        open(path, "w").write(original.replace(find, replace, 1))
        args = shlex.split(entry["command"])
        if "-o" in args:
            args[args.index("-o") + 1] = obj
        try:
            run = subprocess.run(args, cwd=entry["directory"], capture_output=True, text=True)
        finally:
            open(path, "w").write(original)
        checked += 1
        if run.returncode != 0:
            bad += 1
            first = (run.stderr.strip().split("\n") or [""])[0]
            print(f"NOBUILD {mid} ({rel}): {first[:200]}")
print(f"== {checked} compiled, {bad} stale or not building, {unchecked} not checked")
sys.exit(1 if bad else 0)
