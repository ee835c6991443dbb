#!/usr/bin/python3
"""Text classification set from Debian package descriptions (offline after one apt update).

Text: the long description (Translation-en, Description-en without its first, short line;
" ." paragraph marks dropped, whitespace collapsed). Label: the package's Section (Packages;
"contrib/x" -> "x"). One package per source package (the first in the Packages file) so that
near-identical descriptions of sibling binaries (libfoo1, libfoo-dev, ...) cannot fall on
both sides of the split; texts with fewer than MIN_WORDS words are dropped; each class is
cut to the size of the smallest chosen class (balanced), shuffled with random.Random(SEED),
split 80/20 per class into train.tsv / test.tsv (`section<TAB>text`), both shuffled.

Lists: apt-get update -o Acquire::Languages=en -o Dir::State::Lists=LISTS (LISTS must hold
LISTS/partial) fetches Packages and Translation-en into a private folder.
  bench/make_text_set.py LISTS OUT [--sections a,b,c] [--seed 1] [--per-class N]
"""
import argparse, collections, glob, os, random, re, subprocess, sys

def stanzas(path):
    txt = subprocess.run(["/usr/lib/apt/apt-helper", "cat-file", path], check=True,
                         capture_output=True, text=True).stdout
    for block in txt.split("\n\n"):
        d, key = {}, None
        for line in block.split("\n"):
            if line.startswith(" ") and key:
                d[key] += "\n" + line
            elif ":" in line:
                key, v = line.split(":", 1)
                d[key] = v.strip()
        if d:
            yield d

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("lists"); ap.add_argument("out")
    ap.add_argument("--sections", default="games,net,perl,python,science,sound")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--per-class", type=int, default=0, help="0: the smallest class's size")
    ap.add_argument("--min-words", type=int, default=8)
    a = ap.parse_args()
    want = a.sections.split(",")
    longdesc = {}  # Description-md5 -> long text
    for f in sorted(glob.glob(os.path.join(a.lists, "*_main_i18n_Translation-en*"))):
        for d in stanzas(f):
            if "Description-md5" in d and "Description-en" in d:
                body = d["Description-en"].split("\n")[1:]
                body = " ".join(l.strip() for l in body if l.strip() != ".")
                longdesc[d["Description-md5"]] = re.sub(r"\s+", " ", body).strip()
    seen_src, by = set(), collections.defaultdict(list)
    for f in sorted(glob.glob(os.path.join(a.lists, "*_main_binary-*_Packages*"))):
        for d in stanzas(f):
            sec = d.get("Section", "").split("/")[-1]
            src = d.get("Source", d.get("Package", "")).split(" ")[0]
            text = longdesc.get(d.get("Description-md5", ""), "")
            if sec not in want or src in seen_src or len(text.split()) < a.min_words:
                continue
            seen_src.add(src)
            by[sec].append(text)
    n = a.per_class or min(len(by[s]) for s in want)
    rng = random.Random(a.seed)
    train, test = [], []
    for s in want:
        xs = sorted(by[s]); rng.shuffle(xs); xs = xs[:n]
        k = int(0.8 * len(xs))
        train += [(s, t) for t in xs[:k]]; test += [(s, t) for t in xs[k:]]
    rng.shuffle(train); rng.shuffle(test)
    os.makedirs(a.out, exist_ok=True)
    for name, rows in (("train.tsv", train), ("test.tsv", test)):
        with open(os.path.join(a.out, name), "w", encoding="utf-8") as fh:
            for s, t in rows:
                fh.write(f"{s}\t{t}\n")
    print(f"{a.out}: {len(want)} classes x {n} ({', '.join(f'{s} {len(by[s])}' for s in want)} "
          f"available), train {len(train)}, test {len(test)}", file=sys.stderr)

if __name__ == "__main__":
    main()
