"""Every string parameter of every method has a size, checked when the
request arrives (docs/API.md, "Limits"): one byte over it is refused with
-32602 naming the field and the limit, never looked up, stored or judged.
The table is docs/API.md's own "string-limits" table (the unit test
tests/unit/test-schema.c holds it equal to sandboxd/schema.c)."""
import os
import re

from common import expect, expect_eq

INVALID_PARAMS = -32602
API_MD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "API.md")


def _limits():
    """[(method, field, limit)] from docs/API.md's string-limits table."""
    with open(API_MD) as f:
        doc = f.read()
    table = doc.split("<!-- BEGIN string-limits", 1)[1].split("<!-- END string-limits -->", 1)[0]
    rows = []
    for line in table.splitlines():
        m = re.match(r"\| `([a-zA-Z.]+)` \| (.*) \|$", line)
        if not m:
            continue
        for field, n in re.findall(r"`([^`]+)` (\d+)", m.group(2)):
            rows.append((m.group(1), field, int(n)))
    return rows


def _params_at(field, value):
    """Params holding `value` at `field` ("files[].path" -> files[0].path)."""
    root = {}
    cur = root
    keys = field.split(".")
    for i, k in enumerate(keys):
        last = i == len(keys) - 1
        nxt = value if last else {}
        if k.endswith("[]"):
            cur[k[:-2]] = [nxt]
        else:
            cur[k] = nxt
        cur = nxt
    return root


def _expect_refused(world, method, params, field, limit, size):
    msg = world.rpc(method, params, 60)
    err = msg.get("error")
    what = "%s %s of %d bytes" % (method, field, size)
    expect(err is not None, "%s is refused" % what, str(msg)[:300])
    expect_eq((err["code"], err.get("data", {}).get("field")), (INVALID_PARAMS, field), "%s: code and field" % what)
    expect("over the limit of %d bytes" % limit in err["message"], "%s: the message gives the limit" % what,
           err["message"])


def test_every_string_parameter_one_byte_over_its_limit_is_refused_naming_the_field_and_limit(world):
    rows = _limits()
    expect(len(rows) > 40, "docs/API.md lists the string limits", len(rows))
    methods = set(m for m, _f, _n in rows)
    for m in ("sandbox.list", "snapshot.list", "policy.check", "sandbox.get", "command.wait", "fs.read"):
        expect(m in methods, "the table has %s" % m)
    for method, field, limit in rows:
        _expect_refused(world, method, _params_at(field, "a" * (limit + 1)), field.replace("[]", "[0]"),
                        limit, limit + 1)


def test_huge_lookup_strings_are_refused_not_looked_up(world):
    """The cases of the report: 1 MiB strings in lookups and a policy
    question, and a name just over 63 bytes, which was answered
    not_found."""
    mib = "a" * (1 << 20)
    for method, params, field in (("sandbox.list", {"namePrefix": mib}, "namePrefix"),
                                  ("sandbox.list", {"cursor": mib}, "cursor"),
                                  ("snapshot.list", {"sandbox": mib}, "sandbox"),
                                  ("policy.check", {"networkPolicy": "allow-all", "host": mib, "port": 443},
                                   "host")):
        limit = dict(((m, f), n) for m, f, n in _limits())[(method, field)]
        _expect_refused(world, method, params, field, limit, len(mib))
    for method, field in (("sandbox.get", "name"), ("sandbox.delete", "name"), ("command.run", "sandbox"),
                          ("fs.stat", "sandbox")):
        params = {field: "n" * 64}
        if method == "command.run":
            params["cmd"] = "true"
        if method == "fs.stat":
            params["path"] = "/"
        _expect_refused(world, method, params, field, 63, 64)
