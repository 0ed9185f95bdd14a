#!/usr/bin/env python3
"""Turns a .cu file of src/backends/cuda/ into C++ for the host emulation of CUDA
(tests/emulated/device_emulator.hpp): each kernel launch

    name<<<grid, block, shared, stream>>>(args)       (name may be name<T>)

becomes

    ::dptrain_emu::Launcher("name", grid, block, shared, stream)(name, args)

and a #line directive keeps compiler messages pointing at the .cu file.
Everything else is left as it is. Fails when a '<<<' is left that it could
not translate, so a launch is never silently dropped.

usage: translate_launches.py INPUT.cu OUTPUT.cpp
"""
import os
import re
import sys

LAUNCH = re.compile(
    r"(?P<name>\b[A-Za-z_]\w*(?:<[^<>;{}()]*>)?)\s*<<<(?P<config>.*?)>>>\s*\((?P<empty>\s*\))?",
    re.DOTALL,
)


def translate(text):
    def launch(m):
        name = m.group("name")
        config = " ".join(m.group("config").split())
        head = f'::dptrain_emu::Launcher("{name}", {config})({name}'
        newlines = "\n" * m.group(0).count("\n")  # the lines after keep their numbers
        return head + (")" if m.group("empty") else ", ") + newlines

    out = LAUNCH.sub(launch, text)
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
