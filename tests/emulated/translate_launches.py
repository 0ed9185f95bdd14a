#!/usr/bin/env python3
"""Turns a .cu file of src/backends/cuda/ into C++ for the host emulation of CUDA
(tests/emulated/device_emulator.hpp). Each kernel launch

    name<<<grid, block, shared, stream>>>(args)       (name may be name<T>)

becomes

    ::dptrain_emu::Launcher("name", grid, block, shared, stream)(name, args)

and each declaration of shared memory at the start of a line

    __shared__ TYPE a[N], b[M];

is followed, on the same line, by

    ::dptrain_emu::fresh_shared(&a, sizeof a); ::dptrain_emu::fresh_shared(&b, sizeof b);

which fills the variables with all-ones bytes when the first thread of a
block reaches them, so that a block that reads shared memory it did not
write reads NaN, not what the block before left there. A declaration of
dynamic shared memory at the start of a line

    extern __shared__ __align__(A) TYPE name[];        (__align__ optional)

becomes a pointer to the block's dynamic shared memory, which the emulator
fills the same way when the block first asks for it:

    TYPE* name = static_cast<TYPE*>(::dptrain_emu::dynamic_shared());

A kernel declared
with __launch_bounds__(N) gets ::dptrain_emu::within_launch_bounds(N); as
the first statement of its body, so a launch of more threads a block than
N fails as it does on a GPU. A #line directive keeps compiler messages
pointing at the .cu file, and no line moves. Everything else is left as
it is. Fails when a '<<<' is left that it could not translate, or a
__shared__ outside a comment that is not such a declaration, so no launch
or shared variable is silently passed over.

usage: translate_launches.py INPUT.cu OUTPUT.cpp
"""
import os
import re
import sys

LAUNCH = re.compile(
    r"(?P<name>\b[A-Za-z_]\w*(?:<[^<>;{}()]*>)?)\s*<<<(?P<config>.*?)>>>\s*\((?P<empty>\s*\))?",
    re.DOTALL,
)
SHARED = re.compile(r"^[ \t]*(?:alignas\([^()\n]*\)\s*)?__shared__\s+"
                    r"(?P<decl>(?:[^;{}()\n]|\([^;{}()\n]*\))*);",  # a size may call a function
                    re.MULTILINE)
DYNAMIC = re.compile(
    r"^(?P<indent>[ \t]*)extern\s+__shared__\s+(?:(?:__align__|alignas)\([^()\n]*\)\s*)?"
    r"(?P<type>[A-Za-z_][\w:<>, ]*?)\s*\b(?P<name>[A-Za-z_]\w*)\s*\[\s*\]\s*;",
    re.MULTILINE,
)
IDENT = re.compile(r"[A-Za-z_]\w*")
BOUNDS = re.compile(r"__global__\s+void\s+__launch_bounds__\((?P<args>[^()]*(?:\([^()]*\)[^()]*)*)\)")


def top_level_split(text):
    """text split at the commas outside brackets."""
    parts, depth, part = [], 0, ""
    for ch in text:
        depth += ch in "[<("
        depth -= ch in "]>)"
        if ch == "," and depth == 0:
            parts.append(part)
            part = ""
        else:
            part += ch
    return parts + [part]


def declared_names(decl):
    """The names that the declarators of `TYPE a[N], b[M]` declare."""
    parts = top_level_split(decl)
    names = []
    for i, p in enumerate(parts):
        ids = IDENT.findall(p.split("[", 1)[0].split("=", 1)[0])
        if not ids:
            raise SystemExit(f"translate_launches.py: no name in '__shared__ {decl};'")
        names.append(ids[-1] if i == 0 else ids[0])  # after the type, or alone
    return names


def check_bounds(text):
    """A call of within_launch_bounds(N) first in each kernel declared with
    __launch_bounds__(N, ...), on the line of the body's opening brace."""
    out, pos = [], 0
    for m in BOUNDS.finditer(text):
        brace = text.index("{", m.end())
        limit = top_level_split(m.group("args"))[0].strip()
        out += [text[pos : brace + 1], f" ::dptrain_emu::within_launch_bounds({limit});"]
        pos = brace + 1
    return "".join(out) + text[pos:]


def translate(text):
    def launch(m):
        name = m.group("name")
        config = " ".join(m.group("config").split())
        head = f'::dptrain_emu::Launcher("{name}", {config})({name}'
        newlines = "\n" * m.group(0).count("\n")  # the lines after keep their numbers
        return head + (")" if m.group("empty") else ", ") + newlines

    def shared(m):
        calls = (f"::dptrain_emu::fresh_shared(&{n}, sizeof {n});"
                 for n in declared_names(m.group("decl")))
        return m.group(0) + " " + " ".join(calls)

    def dynamic(m):
        kind = m.group("type").strip()
        return (f"{m.group('indent')}{kind}* {m.group('name')} = "
                f"static_cast<{kind}*>(::dptrain_emu::dynamic_shared());")

    code = "\n".join(line.split("//", 1)[0] for line in text.splitlines())
    if code.count("__shared__") != len(SHARED.findall(text)) + len(DYNAMIC.findall(text)):
        raise SystemExit("translate_launches.py: a __shared__ that is not a declaration at the start "
                         "of its line")
    out = check_bounds(SHARED.sub(shared, DYNAMIC.sub(dynamic, LAUNCH.sub(launch, text))))
    if "<<<" in out:
        line = out[: out.index("<<<")].count("\n") + 1
        raise SystemExit(f"translate_launches.py: an untranslated launch near line {line}")
    return out


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    source, target = sys.argv[1], sys.argv[2]
    with open(source, encoding="utf-8") as f:
        text = f.read()
    os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
    with open(target, "w", encoding="utf-8") as f:
        f.write(f'#line 1 "{source}"\n')
        f.write(translate(text))


if __name__ == "__main__":
    main()
