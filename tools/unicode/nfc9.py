#!/usr/bin/python3
"""Writes src/tokenizer/nfc9.h: the code points that utf8proc's NFC treats as
combining or composing but HF tokenizers' NFC treats as unassigned.

HF tokenizers normalizes with the unicode-normalization-alignments crate,
whose tables are Unicode 9.0: a code point assigned later has combining
class 0 there, no decomposition, and composes with nothing. utf8proc (what
nextn links) has newer data. Both sides are asked, not assumed:

  utf8proc   through ctypes (the library nextn links): every code point with
             a non-zero combining class, a canonical decomposition, or a part
             in a canonical composition is a candidate;
  HF         through its Node binding (@anush008/tokenizers, tokenizers
             0.22.2): each candidate X is probed with NFD(X),
             NFD("a" U+0345 X U+0334) (any class but 0 moves X or U+0334)
             and NFC of every composition pair X takes part in.

X is listed when HF does none of it (class 0, no decomposition, no
composition). Every other candidate must behave in HF exactly as in utf8proc
(its decomposition, its order against one mark of each class, its pairs);
otherwise the script fails, since then the table would not be the whole
difference.

usage: /usr/bin/python3 tools/unicode/nfc9.py NODE_DIR > src/tokenizer/nfc9.h
  NODE_DIR: a directory where `npm install @anush008/tokenizers@0.6.0` ran
"""
import ctypes
import ctypes.util
import json
import subprocess
import sys

U = ctypes.CDLL(ctypes.util.find_library("utf8proc"))
U.utf8proc_get_property.restype = ctypes.POINTER(ctypes.c_int16)   # category, combining_class, ...
U.utf8proc_unicode_version.restype = ctypes.c_char_p
U.utf8proc_version.restype = ctypes.c_char_p
U.utf8proc_NFC.restype = ctypes.c_void_p   # malloc'd; leaked (one run)
U.utf8proc_NFD.restype = ctypes.c_void_p
DECOMPOSE = 1 << 4


def ccc(c):
    return U.utf8proc_get_property(c)[1]


def decomp(c):
    buf, last = (ctypes.c_int32 * 8)(), ctypes.c_int(0)
    k = U.utf8proc_decompose_char(c, buf, 8, DECOMPOSE, ctypes.byref(last))
    return [buf[i] for i in range(k)]


def u_norm(f, s):
    return ctypes.string_at(f(s.encode())).decode()


def hf_run(node_dir, probes):
    """[(form, text)] -> HF's NFC or NFD of each text."""
    js = r"""
const path = require('path');
const hf = require(path.join(process.argv[1], 'node_modules/@anush008/tokenizers'));
const n = {c: hf.nfcNormalizer(), d: hf.nfdNormalizer()};
const out = [];
for (const l of require('fs').readFileSync(0, 'utf8').split('\n'))
    if (l) { const [f, s] = JSON.parse(l); out.push(JSON.stringify(n[f].normalizeString(s))); }
process.stdout.write(out.join('\n') + '\n');
"""
    inp = "".join(json.dumps(p) + "\n" for p in probes)
    r = subprocess.run(["node", "-e", js, node_dir], input=inp.encode(), capture_output=True, check=True)
    got = [json.loads(l) for l in r.stdout.decode().splitlines()]
    assert len(got) == len(probes), r.stderr.decode()
    return got


def main():
    node_dir = sys.argv[1]
    cps = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    cls = {c: ccc(c) for c in cps}
    dec = {c: d for c in cps if (d := decomp(c)) != [c]}
    # composition pairs (L, R) -> C: C's decomposition less its last code
    # point, composed, then that last code point (Hangul is arithmetic and old)
    pairs = []
    for c, d in dec.items():
        if len(d) < 2 or 0xAC00 <= c <= 0xD7A3:
            continue
        left = u_norm(U.utf8proc_NFC, "".join(map(chr, d[:-1])))
        if len(left) == 1 and u_norm(U.utf8proc_NFC, left + chr(d[-1])) == chr(c):
            pairs.append((ord(left), d[-1], c))
    in_pair = {}
    for p in pairs:
        for x in p:
            in_pair.setdefault(x, []).append(p)
    cand = sorted({c for c in cps if cls[c]} | set(dec) | set(in_pair))

    # pass 1: does HF treat each candidate as unassigned?
    probes, own = [], []
    for x in cand:
        mine = [("d", chr(x)), ("d", "a\u0345" + chr(x) + "\u0334")]
        mine += [("c", chr(l) + chr(r)) for l, r, _ in in_pair.get(x, [])]
        own.append((x, len(probes), len(mine)))
        probes += mine
    got = hf_run(node_dir, probes)
    new = {x for x, at, k in own if all(got[at + i] == probes[at + i][1] for i in range(k))}

    # pass 2: every other candidate as in utf8proc, against one old mark of
    # each class (before and after it), and every pair (none composes when
    # one of its three code points is new)
    reps = {}
    for c in cand:
        if cls[c] and c not in new and c not in dec:
            reps.setdefault(cls[c], c)
    probes, want = [], []

    def expect(form, s, w):
        probes.append((form, s))
        want.append(w)

    for x in cand:
        if x in new:
            continue
        expect("d", chr(x), u_norm(U.utf8proc_NFD, chr(x)))
        for m in reps.values():
            for s in ("a" + chr(x) + chr(m), "a" + chr(m) + chr(x)):
                expect("d", s, u_norm(U.utf8proc_NFD, s))
    for l, r, c in pairs:
        s = chr(l) + chr(r)
        expect("c", s, s if {l, r, c} & new else chr(c))
    got = hf_run(node_dir, probes)
    bad = [(p, w, g) for p, w, g in zip(probes, want, got) if w != g]
    for p, w, g in bad[:20]:
        print("differs: %s %s: utf8proc %s, HF %s" % (p[0], ascii(p[1]), ascii(w), ascii(g)), file=sys.stderr)
    if bad:
        sys.exit("%d probes differ outside the table" % len(bad))

    ranges = []
    for x in sorted(new):
        if ranges and ranges[-1][1] == x - 1:
            ranges[-1][1] = x
        else:
            ranges.append([x, x])
    print("/* nfc9.h -- generated by tools/unicode/nfc9.py; do not edit.")
    print(" *")
    print(" * Code points that utf8proc %s (Unicode %s) gives a non-zero combining"
          % (U.utf8proc_version().decode(), U.utf8proc_unicode_version().decode()))
    print(" * class, a canonical decomposition or a part in a canonical composition,")
    print(" * but that HF tokenizers' NFC (Unicode 9.0 tables) treats as unassigned:")
    print(" * class 0, no decomposition, composing with nothing. %d code points of %d" % (len(new), len(cand)))
    print(" * candidates; the %d others were checked to behave the same in both. */" % (len(cand) - len(new)))
    print("#ifndef NX_TOKENIZER_NFC9_H")
    print("#define NX_TOKENIZER_NFC9_H")
    print()
    print("#include <stdint.h>")
    print()
    print("/* the utf8proc data it was made against: another needs the script again */")
    print("#define NFC9_UNICODE_VERSION \"%s\"" % U.utf8proc_unicode_version().decode())
    print()
    print("static const uint32_t NFC_UNASSIGNED_IN_9[][2] = {")
    cells = ["{0x%04X, 0x%04X}," % (a, b) for a, b in ranges]
    line = "   "
    for cell in cells:
        if len(line) + 1 + len(cell) > 100:
            print(line)
            line = "   "
        line += " " + cell
    print(line)
    print("};")
    print()
    print("#endif")


if __name__ == "__main__":
    main()
