"""The ndvstack overlay's loader (ndvstack's own code, not upstream's).

Installed as torch/_ndv_overlay/ by the overlay and the patched wheel, and imported by a
line added at the top of torch/__init__.py: it loads the stack's native shims with
RTLD_GLOBAL before torch._C, so their definitions are the ones torch binds. A line at
the end of torch/__init__.py calls verify(), which fails the import if a shim is not
what torch's Python bindings actually call. With `--cpp-from`, the C++ patches' compiled
text stands in for the shims and is loaded and checked the same way. Standard library
only: torch is half imported when this runs.
"""

import ctypes
import json
import os

_DIR = os.path.dirname(os.path.abspath(__file__))

with open(os.path.join(_DIR, "manifest.json")) as _file:
    MANIFEST = json.load(_file)

_libraries = {}
for _shim in MANIFEST["shims"]:
    _libraries[_shim["name"]] = ctypes.CDLL(os.path.join(_DIR, _shim["library"]),
                                            mode=os.RTLD_NOW | os.RTLD_GLOBAL)


def verify():
    """Raises ImportError unless every shim symbol is bound to the shim where shims.toml says
    it is checked: in a library that imports it (its GOT slot), or, for "global", in the
    global symbol lookup that objects loaded later (C++ extensions) bind through."""
    for shim in MANIFEST["shims"]:
        bound_in = _libraries[shim["name"]].ndv_bound_in
        bound_in.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
        for symbol, places in zip(shim["symbols"], shim["bound_in"]):
            for place in places:
                verdict = bound_in(place.encode(), symbol.encode())
                if verdict == 1:
                    continue
                where = "the global symbol lookup (what a C++ extension binds)" if place == "global" else place
                reason = {0: "binds another definition (was torch loaded before the shim?)",
                          -1: "is not loaded or does not import it",
                          -2: "has not bound it yet (lazy binding)"}.get(verdict, f"answered {verdict}")
                raise ImportError(f"ndvstack overlay: {shim.get('kind', 'shim')} {shim['name']} "
                                  f"({shim['patch']}) is not in effect: {where} {reason} for {symbol}")


def calls(name):
    """How often the shim NAME was called, for shims that count (ndv_shim_calls)."""
    count = _libraries[name].ndv_shim_calls
    count.restype = ctypes.c_long
    return count()
