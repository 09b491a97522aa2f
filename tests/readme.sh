#!/bin/sh
# readme.sh: the README's examples are real. Every ```console block of
# README.md is a transcript: lines starting with "$ " are commands (a line
# ending in a backslash goes on), the lines after one are what it prints
# (stdout and stderr together). The blocks run in order in one scratch
# directory, with this build's divtrace first on PATH, and each command's
# output must match, except that
#   - a run of digits and dots followed by " s" or " ms" (a time) or
#     " steps/s" matches any other such run;
#   - a line "[...]" matches any number of lines;
#   - a block opened as ```console skip-ci runs only with README_ALL=1
#     (examples that need a GPU or take long), one opened as ```console
#     torch only where python3 can import torch;
#   - a block opened as ```LANG file=NAME is written to NAME in the scratch
#     directory first (a script or sweep file the commands after it use).
# With README_UPDATE=FILE it also writes the README with every output as
# this run printed it (times and "[...]" cuts kept), for regenerating the
# examples after a change: README_UPDATE=/tmp/R.md tests/readme.sh; then
# compare and copy.
set -u
top=${top_srcdir:-$(dirname "$0")/..}
top=$(cd "$top" && pwd)
DT=${DIVTRACE:-./src/divtrace}
DT=$(cd "$(dirname "$DT")" && pwd)/$(basename "$DT")
T=$(mktemp -d "${TMPDIR:-/tmp}/divtrace-readme-XXXXXX")
trap 'rm -rf "$T"' EXIT
mkdir -p "$T/bin" "$T/work"
ln -s "$DT" "$T/bin/divtrace"
PATH="$T/bin:$PATH"
export PATH
export COLUMNS=80

python3 - "$top/README.md" "$T" "${README_ALL:-0}" "${README_UPDATE:-}" <<'EOF'
import os, re, subprocess, sys

readme, tmp, run_all, update = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4]
work = os.path.join(tmp, "work")
lines = open(readme).read().split("\n")
TIME = re.compile(r"[0-9][0-9.]*( s\b| ms\b| steps/s)")

def norm(s):
    return TIME.sub(lambda m: "T" + m.group(1), s.rstrip())

def match(want, got):
    """want may hold "[...]" lines matching any run of lines."""
    want = [norm(w) for w in want]
    got = [norm(g) for g in got]
    def m(i, j):
        if i == len(want):
            return j == len(got)
        if want[i] == "[...]":
            return any(m(i + 1, k) for k in range(j, len(got) + 1))
        return j < len(got) and want[i] == got[j] and m(i + 1, j + 1)
    return m(0, 0)

have_torch = subprocess.run(["python3", "-c", "import torch"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL).returncode == 0
# an AddressSanitizer build's library cannot be loaded into python3 (its
# runtime must come first): the PyTorch examples are skipped there, as the
# PyTorch tests are
lib = os.environ.get("DIVTRACE_LIB", "")
if have_torch and lib and os.path.exists(lib) and b"__asan_init" in open(lib, "rb").read():
    have_torch = False
out = []          # the README as this run prints it (README_UPDATE)
fails = checked = 0
i = 0
while i < len(lines):
    line = lines[i]
    out.append(line)
    filed = re.match(r"^```\w+ file=(\S+)\s*$", line)
    if filed:
        # a file the examples after it use, written into the scratch directory
        i += 1
        body = []
        while i < len(lines) and lines[i] != "```":
            body.append(lines[i])
            out.append(lines[i])
            i += 1
        open(os.path.join(work, filed.group(1)), "w").write("\n".join(body) + "\n")
        continue
    opener = re.match(r"^```console( skip-ci| torch)?\s*$", line)
    if not opener:
        i += 1
        continue
    kind = (opener.group(1) or "").strip()
    skip = (kind == "skip-ci" and not run_all) or (kind == "torch" and not have_torch)
    if skip:
        print("skip - a ```console %s block (%s)" % (kind, "README_ALL=1 runs it" if kind == "skip-ci"
              else "python3 cannot import torch"))
    i += 1
    block = []
    while i < len(lines) and lines[i] != "```":
        block.append(lines[i])
        i += 1
    # the block's commands and their expected output
    cmds = []
    k = 0
    while k < len(block):
        if block[k].startswith("$ "):
            cmd = block[k][2:]
            full = [block[k]]
            while cmd.endswith("\\") and k + 1 < len(block):
                k += 1
                cmd = cmd[:-1] + "\n" + block[k]
                full.append(block[k])
            k += 1
            want = []
            while k < len(block) and not block[k].startswith("$ "):
                want.append(block[k])
                k += 1
            cmds.append((cmd, full, want))
        else:
            k += 1
    for cmd, full, want in cmds:
        out.extend(full)
        if skip:
            out.extend(want)
            continue
        r = subprocess.run(["sh", "-c", cmd], cwd=work, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        got = r.stdout.split("\n")
        if got and got[-1] == "":
            got.pop()
        checked += 1
        if match(want, got):
            print("ok - $ " + cmd.split("\n")[0])
            # keep the README's cuts where the output still fits them
            out.extend(want if "[...]" in want else got)
        else:
            fails += 1
            print("not ok - $ " + cmd.split("\n")[0])
            print("  README says:")
            for w in want:
                print("    " + w)
            print("  the command printed:")
            for g in got:
                print("    " + g)
            out.extend(got)
    out.append("```")
    i += 1
if update:
    open(update, "w").write("\n".join(out))
print(f"{checked - fails} of {checked} README commands print what the README shows")
sys.exit(1 if fails else 0)
EOF
