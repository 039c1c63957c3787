"""
Move the summary of multi-line docstrings to their second line (ament pep257, D213).

Usage: python scripts/format_docstrings.py FILE_OR_DIR ...
"""

import ast
import pathlib
import sys


def _fix(text: str) -> str:
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    edits = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                 ast.AsyncFunctionDef)):
            continue
        if not node.body or not isinstance(node.body[0], ast.Expr):
            continue
        const = node.body[0].value
        if not (isinstance(const, ast.Constant) and isinstance(const.value, str)):
            continue
        if const.lineno == const.end_lineno:
            continue
        line = lines[const.lineno - 1]
        col = const.col_offset
        for quote in ('"""', "'''"):
            for prefix in ('', 'r'):
                opener = prefix + quote
                if line[col:col + len(opener)] == opener:
                    rest = line[col + len(opener):]
                    if rest.strip():
                        edits.append((const.lineno - 1, col, opener, rest))
                    break
    for idx, col, opener, rest in sorted(edits, reverse=True):
        indent = ' ' * col
        lines[idx] = lines[idx][:col] + opener + '\n' + indent + rest
    return ''.join(lines)


def main(argv):
    """Rewrite each Python file in place."""
    for arg in argv:
        p = pathlib.Path(arg)
        for f in ([p] if p.is_file() else sorted(p.rglob('*.py'))):
            if '.venv' in f.parts:
                continue
            old = f.read_text()
            new = _fix(old)
            if new != old:
                f.write_text(new)
                print(f'fixed {f}')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
