#!/bin/sh
# cli_docs.sh: every long option a command's --help lists is described in
# its man page (man/divtrace-COMMAND.1, where groff writes a hyphen as \-),
# and every command divtrace --help lists has a page.
set -u
top=${top_srcdir:-$(dirname "$0")/..}
DT=${DIVTRACE:-./src/divtrace}
fail=0
for c in $("$DT" --help 2>&1 | awk '/^Commands:/ { on = 1; next } on && /^  [a-z]/ { print $1 } on && /^$/ { on = 0 }'); do
    page="$top/man/divtrace-$c.1"
    if [ ! -r "$page" ]; then
        echo "FAIL: divtrace $c has no man page ($page)"
        fail=1
        continue
    fi
    # the page's text with groff's \- turned into -
    text=$(sed 's/\\-/-/g' "$page")
    for o in $("$DT" "$c" --help 2>&1 | grep -oE -- '--[a-z][a-z0-9-]*[a-z0-9]' | sort -u); do
        if ! printf '%s\n' "$text" | grep -qE -- "$o([^a-z0-9-]|\$)"; then
            echo "FAIL: divtrace $c --help lists $o, divtrace-$c(1) does not"
            fail=1
        fi
    done
    echo "ok: divtrace $c"
done
exit $fail
