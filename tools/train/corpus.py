"""Corpus: the King James Bible as Debian's bible-kjv package ships it.

Extraction (the only external command): `bible -l10000 gen1:1-rev22:21`
prints every chapter as a "Book N" heading line followed by one line per
verse, "  V text" (the -l width keeps each verse on one line). We keep the
headings, drop the verse numbers, and separate chapters by a blank line:

    Genesis 1
    In the beginning God created the heaven and the earth.
    ...

Held-out split: every 20th chapter (index % 20 == 10) goes to eval.txt,
the rest to train.txt: 5% of the chapters, spread over every book.
"""

import re
import subprocess
import sys

EXTRACT = ["bible", "-l10000", "gen1:1-rev22:21"]


def chapters():
    """[(heading, [verse text, ...]), ...] in canonical order."""
    out = subprocess.run(EXTRACT, check=True, capture_output=True, text=True).stdout
    result = []
    for line in out.splitlines():
        if not line.strip():
            continue
        verse = re.match(r"^\s+\d+ (.*)$", line)
        if verse:
            result[-1][1].append(verse.group(1).strip())
        else:
            result.append((line.strip(), []))
    return result


def render(chs):
    return "".join(heading + "\n" + "".join(v + "\n" for v in verses) + "\n" for heading, verses in chs)


def main(outdir):
    chs = chapters()
    if len(chs) != 1189:
        sys.exit(f"corpus: expected 1189 chapters from {' '.join(EXTRACT)}, got {len(chs)}")
    train = [c for i, c in enumerate(chs) if i % 20 != 10]
    held = [c for i, c in enumerate(chs) if i % 20 == 10]
    for name, part in (("train.txt", train), ("eval.txt", held)):
        with open(f"{outdir}/{name}", "w", encoding="utf-8") as f:
            f.write(render(part))
    print(f"corpus: {len(train)} train / {len(held)} held-out chapters, "
          f"{sum(len(v) for _, v in chs)} verses")


if __name__ == "__main__":
    main(sys.argv[1])
