#!/usr/bin/env python3
"""Lists C++ functions longer than a limit; exits 1 if there are any.

  python3 scripts/function_lengths.py [--limit 120] [--all] [PATH...]   (default: agent recovery)

A function's length runs from the first line of its header to its closing
brace (lambdas and local classes count toward the function around them).
Tests (*_test.cc) and testdata/ are left out. The parse is a heuristic over
braces with comments and literals blanked: good enough for this code base's
style, not a C++ parser.
"""
import argparse
import os
import re
import sys

CONTROL = re.compile(r'\b(if|for|while|switch|catch|do|else|try)\s*\($')
NOT_FUNCTION = re.compile(r'^(namespace|class|struct|enum|union|extern)\b')


def blank(src):
    """`src` with comments and string/char literals replaced by spaces (newlines kept)."""
    out, i, n = [], 0, len(src)
    while i < n:
        if src.startswith('//', i):
            j = src.find('\n', i)
            j = n if j < 0 else j
        elif src.startswith('/*', i):
            j = src.find('*/', i + 2)
            j = n if j < 0 else j + 2
        elif src.startswith('R"', i) and re.match(r'R"([^(\s]*)\(', src[i:]):
            delim = re.match(r'R"([^(\s]*)\(', src[i:]).group(1)
            j = src.find(')' + delim + '"', i)
            j = n if j < 0 else j + len(delim) + 2
        elif src[i] in '"\'' and not (src[i] == "'" and i > 0 and src[i - 1].isalnum()):
            q, j = src[i], i + 1
            while j < n and src[j] != q:
                j += 2 if src[j] == '\\' else 1
            j += 1
        else:
            out.append(src[i])
            i += 1
            continue
        out.append(re.sub(r'[^\n]', ' ', src[i:j]))
        i = j
    return ''.join(out)


def functions(path):
    """Yields (lines, first line, name) of every function defined in `path`."""
    src = blank(open(path, encoding='utf-8', errors='replace').read())
    stack, last, current = [], 0, None
    for i, c in enumerate(src):
        if c == '{':
            raw = src[last:i]
            header = raw.strip()
            kind = 'block'
            if (current is None and '(' in header and not NOT_FUNCTION.match(header)
                    and not CONTROL.search(header.split('(')[0] + '(')
                    and not header.endswith('=')):
                first = src.count('\n', 0, last + len(raw) - len(raw.lstrip())) + 1
                names = re.findall(r'([\w:~]+)\s*\(', header)
                current = (first, names[0] if names else header[:40])
                kind = 'function'
            stack.append(kind)
            last = i + 1
        elif c == '}':
            if (stack.pop() if stack else 'block') == 'function':
                first, name = current
                yield src.count('\n', 0, i) + 1 - first + 1, first, name
                current = None
            last = i + 1
        elif c == ';':
            last = i + 1


def sources(paths):
    for p in paths:
        if os.path.isfile(p):
            yield p
            continue
        for root, dirs, files in os.walk(p):
            dirs[:] = sorted(d for d in dirs if d != 'testdata' and not d.startswith('bazel-'))
            for f in sorted(files):
                if f.endswith(('.cc', '.h')) and not f.endswith('_test.cc'):
                    yield os.path.join(root, f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--limit', type=int, default=120)
    ap.add_argument('--all', action='store_true', help='list every function, longest first')
    ap.add_argument('paths', nargs='*', default=['agent', 'recovery'])
    args = ap.parse_args()
    found = sorted(((n, p, line, name) for p in sources(args.paths)
                    for n, line, name in functions(p)), reverse=True)
    over = [f for f in found if f[0] > args.limit]
    for n, p, line, name in (found if args.all else over):
        print(f'{n:5d} {p}:{line} {name}')
    if over:
        print(f'{len(over)} functions over {args.limit} lines', file=sys.stderr)
    return 1 if over else 0


if __name__ == '__main__':
    sys.exit(main())
