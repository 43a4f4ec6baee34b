#!/usr/bin/env python3
"""The documentation's examples run as tests, in the manner of SimGrid's tesh (issue 40).

    check_examples.py HETSIM SOURCE_DIR [--examples | --pages] [--only PAGE] [--timeout S] [--list]

HETSIM is the built binary, SOURCE_DIR the repository root. With neither --examples nor --pages
both checks run. Python 3's standard library only.

How to write a page (README.md and every docs/**/*.md):

  ```sh                        commands that run: each line that starts with `hetsim ` or
  hetsim simulate ...          `build/hetsim ` (after an optional `$ `) is run with bash, its
  # expect: iteration          first word replaced by HETSIM; a line ending in `\\` goes on
  ```                          onto the next. It fails on a non-zero exit status or a timeout.
                               Other lines (mkdir, sqlite3, comments) are shown, not run.

  `# expect: TEXT`, on the lines right after a command: its standard output and error together
      must contain TEXT (several such lines: each of them).
  `# exit: N`, likewise: the command must exit with status N (a refusal shown on purpose).

  ```sh no-test                commands that are shown, not run: those that need a GPU, an MPI
  mpirun -np 2 build/hetsim ...   launch (mpirun), or more than about 60 s. The text around the
  ```                          block says why. A tested block may not hold such a command.

  ```yaml file=PATH            the block must equal the file PATH (relative to the root), so a
  ...                          file a page shows is the file its commands read.
  ```

  A hetsim command in a block fenced without a language, or as bash, shell or console, fails the
  check: fence it as `sh` (tested) or `sh no-test`. Output belongs in a ```text block.

Each page's commands run in order, from a scratch view of the repository root: every top-level
entry linked into a temporary folder, except out/, which starts empty for each page, so a page's
examples cannot lean on files another page (or an earlier run) left in out/.

--pages checks, running nothing but `HETSIM --help`: README.md is under 200 lines, its table of
commands has a row for every subcommand `hetsim --help` lists, every relative link in
README.md and docs/ names a file that exists (and, into a Markdown page, a heading that exists),
the fences above are used as they should be, and the yaml file= blocks equal their files.
"""

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

README_MAX_LINES = 200  # README.md must have fewer lines than this

FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([^\s`]*)\s*(.*?)\s*$")
COMMAND = re.compile(r"^(\$\s+)?(build/hetsim|hetsim)(\s|$)")
HETSIM_INSIDE = re.compile(r"(^|[\s;&|(])(\./)?(build/)?hetsim(\s|$)")
MPI_HETSIM = re.compile(r"^(\S+=\S+\s+)*mpirun\b.*\s(\./)?(build/)?hetsim\s")
EXPECT = re.compile(r"^\s*#\s*expect:\s?(.*)$")
EXIT = re.compile(r"^\s*#\s*exit:\s*(\d+)\s*$")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(\s+\"[^\"]*\")?\)")
UNTESTED_LANGUAGES = {"", "bash", "shell", "console", "shell-session", "zsh"}


class Block:
    def __init__(self, page, line, language, info, lines):
        self.page = page  # path relative to the root
        self.line = line  # 1-based line of the opening fence
        self.language = language
        self.info = info
        self.lines = lines  # the block's lines, without the fences


class Example:
    def __init__(self, page, line, command):
        self.page = page
        self.line = line
        self.command = command
        self.expects = []
        self.exit_status = 0


def pages(root):
    """README.md, then every docs/**/*.md in sorted order (paths relative to root)."""
    found = ["README.md"] if os.path.exists(os.path.join(root, "README.md")) else []
    docs = os.path.join(root, "docs")
    for folder, subfolders, files in os.walk(docs):
        subfolders.sort()
        for name in sorted(files):
            if name.endswith(".md"):
                found.append(os.path.relpath(os.path.join(folder, name), root))
    return found


def read_lines(root, page):
    with open(os.path.join(root, page), encoding="utf-8") as f:
        return f.read().split("\n")


def blocks_and_prose(page, lines):
    """Splits a page into fenced blocks and the prose lines outside them (line, text)."""
    blocks, prose = [], []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            prose.append((i + 1, lines[i]))
            i += 1
            continue
        indent, fence, language, info = m.group(1), m.group(2), m.group(3), m.group(4)
        start = i
        body = []
        i += 1
        while i < len(lines):
            close = lines[i].strip()
            if close.startswith(fence[0] * len(fence)) and close.strip(fence[0]) == "":
                break
            text = lines[i]
            body.append(text[len(indent):] if text.startswith(indent) else text.lstrip())
            i += 1
        blocks.append(Block(page, start + 1, language.lower(), info, body))
        i += 1  # the closing fence
    return blocks, prose


def is_command(text):
    return COMMAND.match(text.strip()) is not None


def examples_of(block):
    """The commands of a tested sh block, with their expectations."""
    found = []
    lines = block.lines
    i = 0
    while i < len(lines):
        text = lines[i].strip()
        if not is_command(text):
            i += 1
            continue
        first = i
        command = text
        while command.endswith("\\") and i + 1 < len(lines):
            i += 1
            command = command[:-1].rstrip() + " " + lines[i].strip()
        command = re.sub(r"^\$\s+", "", command)
        example = Example(block.page, block.line + 1 + first, command)
        i += 1
        while i < len(lines):
            expect, status = EXPECT.match(lines[i]), EXIT.match(lines[i])
            if expect:
                example.expects.append(expect.group(1).rstrip())
            elif status:
                example.exit_status = int(status.group(1))
            else:
                break
            i += 1
        found.append(example)
    return found


def shown_commands(lines):
    """The command lines of a block (continuations joined; blanks and comments left out)."""
    commands, current = [], ""
    for text in lines:
        stripped = text.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        current = (current + " " + stripped).strip()
        if current.endswith("\\"):
            current = current[:-1].rstrip()
        else:
            commands.append(current)
            current = ""
    if current:
        commands.append(current)
    return commands


def slug(heading):
    """The anchor GitHub gives a heading."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(lines):
    seen, result = {}, set()
    in_fence = None
    for text in lines:
        m = FENCE.match(text)
        if m and in_fence is None:
            in_fence = m.group(2)[0]
            continue
        if in_fence is not None:
            if text.strip().startswith(in_fence * 3) and text.strip().strip(in_fence) == "":
                in_fence = None
            continue
        h = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", text)
        if h:
            base = slug(h.group(1))
            n = seen.get(base, 0)
            result.add(base if n == 0 else "%s-%d" % (base, n))
            seen[base] = n + 1
    return result


def subcommands(hetsim):
    """The subcommands `hetsim --help` lists."""
    done = subprocess.run([hetsim, "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          timeout=60)
    text = done.stdout.decode("utf-8", "replace")
    names, listing = [], False
    for line in text.split("\n"):
        if line.startswith("Subcommands:"):
            listing = True
        elif listing:
            m = re.match(r"^  (\S+)\s", line)
            if m:
                names.append(m.group(1))
            elif line.strip() and not line.startswith(" "):
                listing = False
    return names


def check_pages(root, page_list, hetsim):
    """Returns a list of problems (strings); empty when every page is as it should be."""
    problems = []
    readme = read_lines(root, "README.md")
    names = subcommands(hetsim)
    if not names:
        problems.append("%s --help lists no subcommands" % hetsim)
    for name in names:
        if not any(t.startswith("| `%s` |" % name) for t in readme):
            problems.append("README.md: the table of commands has no row for `%s` "
                            "(hetsim --help lists it)" % name)
    count = len(readme) - (1 if readme and readme[-1] == "" else 0)
    if count >= README_MAX_LINES:
        problems.append("README.md: %d lines; it must stay under %d (move detail into docs/)"
                        % (count, README_MAX_LINES))
    anchor_cache = {}
    for page in page_list:
        lines = read_lines(root, page)
        blocks, prose = blocks_and_prose(page, lines)
        for block in blocks:
            where = "%s:%d" % (page, block.line)
            if block.language in UNTESTED_LANGUAGES or (block.language == "sh" and
                                                        block.info not in ("", "no-test")):
                for n, text in enumerate(block.lines):
                    if is_command(text) or MPI_HETSIM.match(text.strip()):
                        problems.append(
                            "%s:%d: a hetsim command in a block fenced as %r: fence it as sh "
                            "(run by the tests) or sh no-test" %
                            (page, block.line + 1 + n, block.language or "(no language)"))
                        break
            if block.language == "sh" and block.info == "":
                for n, text in enumerate(block.lines):
                    stripped = text.strip()
                    if stripped.startswith("#") or is_command(stripped):
                        continue
                    if HETSIM_INSIDE.search(stripped) or re.match(r"^(\S+=\S+\s+)*mpirun\b",
                                                                  stripped):
                        problems.append(
                            "%s:%d: not run by the tests (not a line that starts with hetsim): "
                            "move it to a ```sh no-test block" % (page, block.line + 1 + n))
            m = re.match(r"^file=(\S+)$", block.info)
            if m:
                path = os.path.join(root, m.group(1))
                if not os.path.exists(path):
                    problems.append("%s: file=%s does not exist" % (where, m.group(1)))
                else:
                    with open(path, encoding="utf-8") as f:
                        wanted = f.read().rstrip("\n").split("\n")
                    if [t.rstrip() for t in wanted] != [t.rstrip() for t in block.lines]:
                        problems.append("%s: the block differs from %s: copy the file into it"
                                        % (where, m.group(1)))
        for line_number, text in prose:
            for target, _ in LINK.findall(re.sub(r"`[^`]*`", "", text)):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                    continue  # http:, https:, mailto:
                path, _, fragment = target.partition("#")
                resolved = os.path.normpath(os.path.join(os.path.dirname(page), path)) \
                    if path else page
                full = os.path.join(root, resolved)
                if not os.path.exists(full):
                    problems.append("%s:%d: link to %s: no such file" %
                                    (page, line_number, target))
                    continue
                if fragment and resolved.endswith(".md"):
                    if resolved not in anchor_cache:
                        anchor_cache[resolved] = anchors(read_lines(root, resolved))
                    if fragment not in anchor_cache[resolved]:
                        problems.append("%s:%d: link to %s: no heading with that anchor in %s"
                                        % (page, line_number, target, resolved))
    return problems


def scratch_root(root):
    """A temporary folder that links every top-level entry of root, with an empty out/."""
    scratch = tempfile.mkdtemp(prefix="hetsim-docs-")
    for name in os.listdir(root):
        if name != "out":
            os.symlink(os.path.join(root, name), os.path.join(scratch, name))
    os.mkdir(os.path.join(scratch, "out"))
    return scratch


def run_examples(root, hetsim, page_list, timeout, list_only):
    failures, ran, skipped = [], 0, 0
    started = time.monotonic()
    for page in page_list:
        blocks, _ = blocks_and_prose(page, read_lines(root, page))
        examples = []
        for block in blocks:
            if block.language == "sh" and block.info == "":
                examples.extend(examples_of(block))
            elif block.language == "sh" and block.info == "no-test":
                skipped += len(shown_commands(block.lines))
        if not examples:
            continue
        scratch = None if list_only else scratch_root(root)
        try:
            for example in examples:
                if list_only:
                    print("%s:%d: %s" % (page, example.line, example.command))
                    continue
                words = example.command.split(None, 1)
                command = shlex.quote(hetsim) + (" " + words[1] if len(words) > 1 else "")
                t0 = time.monotonic()
                try:
                    done = subprocess.run(["bash", "-c", command], cwd=scratch,
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                          timeout=timeout)
                    output = done.stdout.decode("utf-8", "replace")
                    status = done.returncode
                except subprocess.TimeoutExpired as e:
                    output = (e.stdout or b"").decode("utf-8", "replace")
                    status = None
                seconds = time.monotonic() - t0
                ran += 1
                problems = []
                if status is None:
                    problems.append("timed out after %d s (fence it as sh no-test?)" % timeout)
                elif status != example.exit_status:
                    problems.append("exit status %d, expected %d" % (status, example.exit_status))
                for text in example.expects:
                    if text not in output:
                        problems.append("output lacks %r" % text)
                mark = "FAIL" if problems else "ok"
                print("%-4s %6.1f s  %s:%d: %s" % (mark, seconds, page, example.line,
                                                    example.command))
                sys.stdout.flush()
                if problems:
                    tail = "\n".join(output.rstrip("\n").split("\n")[-30:])
                    failures.append("%s:%d: %s\n  %s\n  output (last 30 lines):\n%s" % (
                        page, example.line, example.command, "\n  ".join(problems),
                        "\n".join("    " + t for t in tail.split("\n"))))
        finally:
            if scratch:
                shutil.rmtree(scratch, ignore_errors=True)
    if not list_only:
        print("%d commands run in %.1f s, %d shown and not run (sh no-test)" % (
            ran, time.monotonic() - started, skipped))
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("hetsim", help="the built hetsim binary")
    parser.add_argument("root", help="the repository root (CMake's source dir)")
    parser.add_argument("--examples", action="store_true", help="run the examples only")
    parser.add_argument("--pages", action="store_true", help="check the pages only")
    parser.add_argument("--only", action="append", default=[],
                        help="only this page (relative to the root; repeatable)")
    parser.add_argument("--timeout", type=float, default=120, help="seconds per command")
    parser.add_argument("--list", action="store_true", help="list the commands, run nothing")
    args = parser.parse_args()
    root = os.path.abspath(args.root)
    hetsim = os.path.abspath(args.hetsim)
    if not os.access(hetsim, os.X_OK):
        print("check_examples: %s is not an executable" % hetsim)
        return 2
    page_list = pages(root)
    if args.only:
        page_list = [p for p in page_list if p in set(os.path.normpath(o) for o in args.only)]
        if not page_list:
            print("check_examples: no such page among README.md and docs/: %s" % args.only)
            return 2
    both = not args.examples and not args.pages
    failed = False
    if args.pages or both:
        problems = check_pages(root, pages(root), hetsim)
        for p in problems:
            print("FAIL " + p)
        print("pages: %d checked, %d problems" % (len(pages(root)), len(problems)))
        failed = failed or bool(problems)
    if args.examples or both or args.list:
        failures = run_examples(root, hetsim, page_list, args.timeout, args.list)
        for f in failures:
            print("\nFAIL " + f)
        failed = failed or bool(failures)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
