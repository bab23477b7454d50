"""The masks (libcore/rootfs.c masked_files, masked_dirs) attach on the
O_PATH fd of the mount point they opened (attach_at): every masked path
that exists in the sandbox is the verified /dev/null (files) or an empty
read-only tmpfs (directories), for the sandbox user and for root, in the
suite's user-namespace mode; nothing of the file underneath reads through
(no content, no entry), and root cannot write into a masked directory."""
import os
import re

from common import expect, sandbox, sh

HERE = os.path.dirname(os.path.abspath(__file__))


def _lists():
    src = open(os.path.join(HERE, "..", "..", "libcore", "rootfs.c")).read()
    out = []
    for name in ("masked_files", "masked_dirs"):
        body = re.search(r"static const char \*const %s\[\] = \{(.*?)\};" % name, src, re.S).group(1)
        body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
        out.append(re.findall(r'"([^"]+)"', body))
    return out


SCRIPT = r"""
for f in %(files)s; do
        [ -e "$f" ] || [ -L "$f" ] || continue
        t=$(stat -c '%%F %%t:%%T' "$f" 2>&1)
        [ "$t" = "character special file 1:3" ] || echo "FILE $f: $t"
        n=$(head -c 64 "$f" 2>/dev/null | wc -c)
        [ "$n" = 0 ] || echo "READ $f: $n bytes"
done
for d in %(dirs)s; do
        [ -e "$d" ] || continue
        l=$(ls -A "$d" 2>&1)
        [ -z "$l" ] || echo "DIR $d: $(echo $l | head -c 100)"
        fs=$(stat -f -c %%T "$d")
        [ "$fs" = tmpfs ] || echo "FS $d: $fs"
        touch "$d/x" 2>/dev/null && echo "WRITE $d"
done
echo done
"""


def test_every_masked_path_shows_nothing_to_root_and_user(world):
    files, dirs = _lists()
    expect(len(files) > 10 and len(dirs) > 10, "the mask lists parsed", files, dirs)
    script = SCRIPT % {"files": " ".join(files), "dirs": " ".join(dirs)}
    with sandbox(world, "masks", "--deny-all") as sb:
        for flags in ((), ("--sudo",)):
            code, out, err = sh(world, sb, script, *flags)
            expect(out.endswith("done\n") and out == "done\n",
                   "masked paths %s: %s %s" % (flags, out.strip()[:800], err.strip()[:200]))
