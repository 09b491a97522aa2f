#!/usr/bin/env python3
"""html_check.py: load pages written by `divtrace diff --html` and
`divtrace report --html` in headless Chromium, driven over the DevTools
protocol on a pipe (--remote-debugging-pipe: JSON messages ended by NUL on
file descriptors 3 and 4; standard library only), and check them against
what `divtrace diff --json` and `divtrace show --json` say of the traces:

  - the page loads with no exception, no console or log error (a fetch the
    page's no-network policy blocks is one), and no error box;
  - the heatmap's cells are those the records say: a cell per layer, step
    (and time step) with records, marked "differs" where some op's hashes
    differ, "origin" where an op differs whose inputs are equal (at the
    first divergent step exactly diff --json's origins), "first" where the
    step's first divergent op is;
  - a real mouse click on the cell of the first divergence (and on one of a
    step before it) shows that op's records, with the hashes show prints.

usage: html_check.py CHROMIUM PAGE-SPEC...
PAGE-SPEC: page=P,diff=D,a=SA,b=SB[,pair=N][,verdict=V][,ckpt=1][,text=X][,nogrid=1]
  P the page, D diff --json of A B, SA and SB show --json of A and B, N the
  index of the run pair to select on a report page, V the verdict the page
  must show, ckpt=1: the first divergence's cell shows checkpoint details,
  X a text the page must show, nogrid=1: the page has no heatmap (a pair
  without its traces), and the heatmap checks are left out.
Prints one "ok - " or "FAIL - " line per check; exits 1 when one fails.
"""
import json
import os
import re
import select
import shutil
import subprocess
import sys
import tempfile
import time

FAILS = []


def ok(cond, what, detail=""):
    if cond:
        print("ok - " + what)
    else:
        FAILS.append(what)
        print("FAIL - " + what + (": " + detail if detail else ""))
    return cond


class Browser:
    """Headless Chromium with a page target, spoken to over the pipe."""

    def __init__(self, exe):
        self.prof = tempfile.mkdtemp(prefix="divtrace-html-chromium-")
        to_r, self.to_w = os.pipe()
        self.from_r, from_w = os.pipe()
        # high descriptors first, so that neither lands on 3 or 4 early
        hi_r, hi_w = os.dup(to_r), os.dup(from_w)

        def fds():
            os.dup2(hi_r, 3)
            os.dup2(hi_w, 4)

        args = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                "--disable-extensions", "--disable-background-networking", "--mute-audio",
                "--remote-debugging-pipe", "--user-data-dir=" + self.prof,
                "--window-size=1400,1000", "about:blank"]
        self.log = open(os.path.join(self.prof, "stderr.log"), "w+")
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log,
                                     preexec_fn=fds, pass_fds=(3, 4))
        for fd in (to_r, from_w, hi_r, hi_w):
            os.close(fd)
        self.buf = b""
        self.next_id = 0
        self.events = []
        self.sid = None
        tid = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.sid = self.call("Target.attachToTarget", {"targetId": tid, "flatten": True})["sessionId"]
        for m in ("Runtime.enable", "Log.enable", "Page.enable"):
            self.call(m)
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": 1400, "height": 1000, "deviceScaleFactor": 1, "mobile": False})

    def _read(self, deadline):
        while b"\0" not in self.buf:
            left = deadline - time.time()
            if left <= 0:
                raise TimeoutError("no answer from chromium")
            r, _, _ = select.select([self.from_r], [], [], left)
            if r:
                chunk = os.read(self.from_r, 1 << 20)
                if not chunk:
                    raise EOFError("chromium closed the pipe")
                self.buf += chunk
        msg, self.buf = self.buf.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method, params=None, timeout=20):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if self.sid and not method.startswith("Target."):
            msg["sessionId"] = self.sid
        os.write(self.to_w, json.dumps(msg).encode() + b"\0")
        deadline = time.time() + timeout
        while True:
            m = self._read(deadline)
            if m.get("id") == self.next_id:
                if "error" in m:
                    raise RuntimeError("%s: %s" % (method, m["error"]))
                return m.get("result", {})
            if "method" in m:
                self.events.append(m)

    def wait_event(self, name, timeout=20):
        deadline = time.time() + timeout
        while True:
            for k, e in enumerate(self.events):
                if e["method"] == name:
                    del self.events[k]
                    return e
            self.events.append(self._read(deadline))

    def eval(self, expr):
        r = self.call("Runtime.evaluate", {"expression": expr, "returnByValue": True})
        if "exceptionDetails" in r:
            raise RuntimeError("evaluate: %s" % r["exceptionDetails"])
        return r["result"].get("value")

    def errors(self):
        """Exceptions, console errors and log errors seen so far."""
        out = []
        for e in self.events:
            p = e.get("params", {})
            if e["method"] == "Runtime.exceptionThrown":
                out.append("exception: %s" % p["exceptionDetails"].get("exception", {}).get("description", p))
            elif e["method"] == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert", "warning"):
                out.append("console %s: %s" % (p["type"], [a.get("value") for a in p.get("args", [])]))
            elif e["method"] == "Log.entryAdded" and p["entry"]["level"] in ("error", "warning"):
                out.append("log %s: %s" % (p["entry"]["level"], p["entry"]["text"]))
        return out

    def load(self, path):
        self.events = []
        self.call("Page.navigate", {"url": "file://" + os.path.abspath(path)})
        self.wait_event("Page.loadEventFired")
        deadline = time.time() + 20
        while self.eval("document.body && document.body.dataset.ready") != "1":
            if time.time() > deadline or self.eval("!!document.getElementById('dt-errors')"):
                break
            time.sleep(0.05)

    def click(self, selector):
        """A real left click in the middle of the element, after scrolling to it."""
        pos = self.eval("""(() => { const e = document.querySelector(%s); if (!e) return null;
            e.scrollIntoView({block: 'center', inline: 'center'}); const b = e.getBoundingClientRect();
            return [b.x + b.width / 2, b.y + b.height / 2]; })()""" % json.dumps(selector))
        if pos is None:
            return False
        for t in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent",
                      {"type": t, "x": pos[0], "y": pos[1], "button": "left", "clickCount": 1})
        return True

    def close(self):
        try:
            self.call("Browser.close", timeout=5)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        shutil.rmtree(self.prof, ignore_errors=True)


# ---- what the traces say, independently of the page ----

def time_step(name):
    """The time step an op name carries (as divtrace-diff(1) defines it), or -1."""
    m = re.match(r"L[0-9]+\.t([0-9]+)\.(.+)$", name)
    if m:
        return int(m.group(1))
    if "@" in name:
        m = re.match(r"L[0-9]+\.t([0-9]+)\.(.+)$", name.split("@", 1)[1])
        if m:
            return int(m.group(1))
    return -1


def expected(diff, sa, sb):
    """Per step, per (layer, time step): flags 1 differs, 2 first, 4 origin;
    and the cells with records (cells identical everywhere included)."""
    ops = sa["ops"]
    assert [o["name"] for o in ops] == [o["name"] for o in sb["ops"]], "the test needs equal op lists"
    cell = [(o["name"].split(".", 1)[0], time_step(o["name"])) for o in ops]
    ha = {s["step"]: {r["op"]: r["hash"] for r in s["records"]} for s in sa["steps"]}
    hb = {s["step"]: {r["op"]: r["hash"] for r in s["records"]} for s in sb["steps"]}
    common = diff["common_steps"]
    first = diff["first_divergence"]["step"] if diff.get("first_divergence") else None
    flags, present = {}, set()
    for s in range(common):
        diffs = [i for i in range(len(ops)) if i in ha[s] and i in hb[s] and ha[s][i] != hb[s][i]]
        for i in range(len(ops)):
            if i in ha[s] and i in hb[s]:
                present.add((s,) + cell[i])
        for n, i in enumerate(diffs):
            f = 1 | (2 if n == 0 else 0)
            clean = True
            for inp in ops[i]["inputs"]:
                x = inp["op"]
                if inp.get("previous_step"):
                    if first is None or s <= first:
                        continue
                    src_a, src_b = ha.get(s - 1, {}), hb.get(s - 1, {})
                else:
                    src_a, src_b = ha[s], hb[s]
                if x not in src_a or x not in src_b or src_a[x] != src_b[x]:
                    clean = False
            if clean:
                f |= 4
            k = (s,) + cell[i]
            flags[k] = flags.get(k, 0) | f
    return flags, present


def check_page(b, spec):
    page = spec["page"]
    label = os.path.basename(page) + (" pair %s" % spec["pair"] if "pair" in spec else "")
    try:
        check_content(b, spec, label)
    except Exception as e:  # a page that breaks the checks fails them, it does not stop them
        ok(False, label + ": the checks ran through", repr(e)[:400])
    errs = b.errors()
    ok(not errs, label + ": no exception or console error", "; ".join(errs)[:500])


def check_content(b, spec, label):
    page = spec["page"]
    with open(spec["diff"]) as f:
        diff = json.load(f)
    with open(spec["a"]) as f:
        sa = json.load(f)
    with open(spec["b"]) as f:
        sb = json.load(f)
    b.load(page)
    ok(b.eval("document.body.dataset.ready") == "1", label + ": the page drew itself")
    if "pair" in spec:
        b.eval("""(() => { const s = document.getElementById('pair-select'); s.value = '%s';
                   s.dispatchEvent(new Event('change')); })()""" % spec["pair"])
        ok(b.eval("document.getElementById('pair-view').dataset.pair") == str(spec["pair"]),
           label + ": the pair is selected")
    box = b.eval("(document.getElementById('dt-errors') || {}).textContent || ''")
    ok(not box, label + ": no error box", box)
    if "text" in spec:
        ok(spec["text"] in b.eval("document.body.innerText"), label + ": says '%s'" % spec["text"])
    if "verdict" in spec:
        v = b.eval("(document.getElementById('verdict') || {dataset: {}}).dataset.verdict")
        ok(v == spec["verdict"], label + ": the verdict shown is explain's (%s)" % spec["verdict"], str(v))
    if spec.get("nogrid"):
        ok(not b.eval("!!document.getElementById('heatmap')"), label + ": no heatmap")
        return
    want, present = expected(diff, sa, sb)
    # a cell's marks as drawn: its classes give its colour and outline
    rects = b.eval("""[...document.querySelectorAll('#heatmap rect.cell')].map((r) => {
        const c = r.classList;
        return [+r.dataset.step0, +r.dataset.step1, r.dataset.layer, +r.dataset.t,
                (c.contains('c-diff') || c.contains('c-origin') ? 1 : 0) | (c.contains('c-first') ? 2 : 0) |
                (c.contains('c-origin') ? 4 : 0)]; })""")
    ok(rects and all(r[0] == r[1] for r in rects), label + ": one step per column")
    got = {(r[0], r[2], r[3]): r[4] for r in rects}
    ok(len(got) == len(rects), label + ": one cell per step, layer and time step")
    ok(set(got) == present, label + ": a cell for every step, layer and time step with records",
       "%d cells, %d expected; e.g. %s" % (len(got), len(present), sorted(set(got) ^ present)[:5]))
    have = {k: v for k, v in got.items() if v}
    ok(have == want, label + ": the cells marked differs/first/origin are those the records say",
       "page %d, expected %d; e.g. %s" % (len(have), len(want),
                                          [(k, have.get(k), want.get(k)) for k in sorted(set(have) | set(want))
                                           if have.get(k) != want.get(k)][:6]))
    fd = diff.get("first_divergence")
    if fd:
        s = fd["step"]
        ocells = {(o["name"].split(".", 1)[0], time_step(o["name"])) for o in diff["origins"]}
        pcells = {(k[1], k[2]) for k, v in have.items() if k[0] == s and v & 4}
        ok(pcells == ocells, label + ": origin cells at step %d match diff --json's %d origins" % (s, len(diff["origins"])),
           "page %s, diff %s" % (sorted(pcells), sorted(ocells)))
        fcell = (s, fd["layer"], fd.get("time_step", -1))
        ok([k for k, v in have.items() if k[0] == s and v & 2] == [fcell],
           label + ": the first divergence's cell is layer %s, time step %s" % (fcell[1], fcell[2]))
        ok(not [k for k in have if k[0] < s], label + ": nothing marked before step %d" % s)
        # a real click on that cell shows that op's records in both runs
        sel = "#heatmap rect.cell[data-step0='%d'][data-layer='%s'][data-t='%d']" % fcell
        ok(b.click(sel), label + ": clicked the first divergence's cell")
        ents = b.eval("""[...document.querySelectorAll('#details .entry')].map((e) => ({op: e.dataset.op,
            step: +e.dataset.step, role: +e.dataset.role, a: e.querySelector('.hash-a').textContent,
            b: e.querySelector('.hash-b').textContent, ckpt: (e.querySelector('.ckpt') || {}).textContent || ''}))""")
        first = [e for e in ents if e["op"] == fd["name"] and e["step"] == s]
        recs = lambda sh: {r["name"]: r for st in sh["steps"] if st["step"] == s for r in st["records"]}
        ra, rb = recs(sa).get(fd["name"]), recs(sb).get(fd["name"])
        ok(first and first[0]["role"] & 1 and ents[0]["op"] == fd["name"],
           label + ": the details show %s first, as the first divergent op" % fd["name"], str(ents)[:300])
        ok(first and ra and rb and first[0]["a"] == ra["hash"] and first[0]["b"] == rb["hash"],
           label + ": with the hashes show prints for A and B", "page %s, show %s %s" % (first[:1], ra and ra["hash"], rb and rb["hash"]))
        ok(not first or bool(first[0]["role"] & 2) == (fd["name"] in [o["name"] for o in diff["origins"]]),
           label + ": marked as an origin exactly when diff --json lists it")
        if spec.get("ckpt"):
            want_ck = "%d of %d elements differ" % (fd["elements_differ"], fd["elements"])
            ok(first and want_ck in first[0]["ckpt"], label + ": its checkpoint details (%s)" % want_ck,
               first[0]["ckpt"] if first else "")
        # and a cell of an earlier, identical step says so
        if s > 0:
            sel = "#heatmap rect.cell[data-step0='%d'][data-layer='%s']" % (s - 1, fd["layer"])
            b.click(sel)
            text = b.eval("(document.getElementById('details') || {}).textContent || ''")
            ok("every op record here is equal" in text and not b.eval("document.querySelectorAll('#details .entry').length"),
               label + ": a cell of step %d shows equal records" % (s - 1), text[:200])


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    specs = [dict(kv.split("=", 1) for kv in arg.split(",")) for arg in sys.argv[2:]]
    b = Browser(sys.argv[1])
    try:
        for spec in specs:
            check_page(b, spec)
    finally:
        b.close()
    sys.exit(1 if FAILS else 0)


if __name__ == "__main__":
    main()
