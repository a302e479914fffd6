"""Size report: lines per source file (largest first), totals, and the number of config knobs.

    python tools/sz.py
"""
import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def files():
    for top in ("pydynamo", "csrc"):
        for dirpath, _, names in os.walk(os.path.join(ROOT, top)):
            for n in names:
                if n.endswith((".py", ".c", ".h", ".cpp")):
                    yield os.path.join(dirpath, n)


def main():
    rows = []
    for path in files():
        with open(path) as f:
            rows.append((sum(1 for line in f if line.strip()), os.path.relpath(path, ROOT)))
    rows.sort(reverse=True)
    for n, path in rows:
        print(f"{n:6d}  {path}{'   <- past ~1,000 lines: split it' if n > 1000 else ''}")
    py = sum(n for n, p in rows if p.endswith(".py"))
    print(f"{sum(n for n, _ in rows):6d}  total non-blank lines ({py} Python, {sum(n for n, _ in rows) - py} C)")
    with open(os.path.join(ROOT, "pydynamo", "config.py")) as f:
        tree = ast.parse(f.read())
    knobs = [t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets
             if isinstance(t, ast.Name) and not t.id.startswith("_")]
    print(f"config knobs: {len(knobs)} ({', '.join(knobs)})")


if __name__ == "__main__":
    main()
