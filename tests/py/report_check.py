#!/usr/bin/env python3
"""Check a cnx-report page against the ledger, read with Python's sqlite3.

usage: report_check.py LEDGER REQUEST DIR [--no-class-check]

The page is parsed with html.parser (no cnx code): every timeline row is a
<g class="stage-row" data-stage=...> and every bar in it a
<rect class="bar ..." data-outcome=...>. The truth is computed here from the
ledger's rows, with the rules docs/report.md states:
  bars of a stage = its attempts rows (each run of an attempt)
                  + its `released` decisions without an attempts row
                  + its `reused` decisions
                  + its `dead_lettered` decisions without an attempts row;
  outcome of an attempts row: succeeded, preempted; failed -> dead-lettered
  if a dead_lettered decision names that attempt, failed-retried if a later
  attempt or release of the task exists, else failed; started -> lost if a
  later attempt or release exists or the request finished, else running.
Checked: every stage of the request has exactly one row; the number of bars
per stage and the multiset of outcome classes per stage equal the truth;
every bar of attempt 2 or later has the `retry` class (its outline);
neuroglancer.json names every layer the request's stages wrote (but the
alignment's match/solve parts); the link's state equals neuroglancer.json.
Prints one line per check; exit 1 on any failure.
"""
import collections
import html.parser
import json
import sqlite3
import sys
import urllib.parse


class Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.rows = collections.OrderedDict()
        self.cur = None
        self.depth = 0
        self.ng_href = None
        self.elements = collections.Counter()
        self.unmarked_retries = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.elements[tag] += 1
        cls = (a.get("class") or "").split()
        if tag == "g" and "stage-row" in cls:
            name = a.get("data-stage")
            if name in self.rows:
                self.rows[name + " (again)"] = []
            self.rows.setdefault(name, [])
            self.cur = name
        if tag == "rect" and "bar" in cls and self.cur is not None:
            self.rows[self.cur].append(a.get("data-outcome"))
            if int(a.get("data-attempt") or 0) > 1 and "retry" not in cls:
                self.unmarked_retries += 1
        if tag == "a" and a.get("id") == "ng-link":
            self.ng_href = a.get("href")

    def handle_endtag(self, tag):
        if tag == "g":
            self.cur = None


def truth(db, req):
    q = lambda sql, *p: db.execute(sql, p).fetchall()
    finished = q("SELECT finished FROM requests WHERE id = ?", req)[0][0]
    tasks = {idx: (stage, key) for idx, stage, key in
             q("SELECT idx, stage, task_key FROM tasks WHERE request = ?", req)}
    by_key = {key: idx for idx, (stage, key) in tasks.items() if key}
    rel = q("SELECT idx, attempt, type FROM releases WHERE request = ?", req)
    att = q("SELECT task_key, attempt, state FROM attempts WHERE request = ?", req)
    att_of = collections.defaultdict(set)
    for key, attempt, _ in att:
        if key in by_key:
            att_of[by_key[key]].add(attempt)
    out = collections.defaultdict(list)
    for key, attempt, state in att:
        if key not in by_key:
            continue
        idx = by_key[key]
        later = any(a > attempt for a in att_of[idx]) or any(
            i == idx and a > attempt and t == "released" for i, a, t in rel)
        dead = any(i == idx and a == attempt and t == "dead_lettered" for i, a, t in rel)
        if state in ("succeeded", "preempted"):
            c = state
        elif state == "failed":
            c = "dead-lettered" if dead else "failed-retried" if later else "failed"
        elif state == "started":
            c = "lost" if later or finished else "running"
        else:
            c = "unknown"
        out[tasks[idx][0]].append(c)
    for idx, attempt, typ in rel:
        if idx not in tasks:
            continue
        has_att = attempt in att_of[idx]
        if typ == "released" and not has_att:
            later = any(i == idx and a > attempt for i, a, _ in rel) or finished
            out[tasks[idx][0]].append("lost" if later else "queued")
        elif typ == "reused":
            out[tasks[idx][0]].append("already-done")
        elif typ == "dead_lettered" and not has_att:
            out[tasks[idx][0]].append("dead-lettered")
    return out


def main():
    ledger, req, out = sys.argv[1:4]
    db = sqlite3.connect("file:%s?mode=ro" % ledger, uri=True)
    page = Page()
    page.feed(open(out + "/index.html", encoding="utf-8").read())
    fails = 0

    def check(what, ok):
        nonlocal fails
        print(("ok: " if ok else "FAILED: ") + what)
        fails += 0 if ok else 1

    stages = [s for (s,) in db.execute(
        "SELECT stage FROM stages WHERE request = ? ORDER BY seq", (req,))]
    check("every stage of %s has one timeline row, in plan order (%s; page: %s)"
          % (req, ", ".join(stages), ", ".join(page.rows)),
          list(page.rows)[:len(stages)] == stages and
          len(page.rows) == len(set(page.rows)))
    want = truth(db, req)
    for s in stages:
        got = page.rows.get(s, [])
        check("stage %s: %d bars, the ledger's %d (attempts %d)" % (
            s, len(got), len(want[s]), db.execute(
                "SELECT count(*) FROM attempts a JOIN tasks t ON t.task_key = "
                "a.task_key AND t.request = a.request WHERE a.request = ? AND "
                "t.stage = ?", (req, s)).fetchone()[0]),
              len(got) == len(want[s]))
        check("stage %s: outcomes %s" % (s, dict(collections.Counter(got))),
              collections.Counter(got) == collections.Counter(want[s]))
    check("no script element in the page", page.elements["script"] == 0)
    check("every bar of attempt 2 or later is outlined as a retry",
          page.unmarked_retries == 0)
    state = json.load(open(out + "/neuroglancer.json"))
    layers = {l["name"]: l for l in state["layers"]}
    dataset = db.execute("SELECT dataset FROM requests WHERE id = ?",
                         (req,)).fetchone()[0].rstrip("/") + "/"
    written = {l[len(dataset):] if l.startswith(dataset) else l for (l,) in db.execute(
        "SELECT output_layer FROM stages WHERE request = ? AND worker NOT IN "
        "('align-match', 'align-solve')", (req,))}
    check("neuroglancer.json has every layer written (%s)" % sorted(written),
          written <= set(layers) and all(
              l["source"].startswith("precomputed://") for l in layers.values()))
    href = page.ng_href or ""
    frag = href.split("#!", 1)[1] if "#!" in href else ""
    check("the Neuroglancer link carries that state",
          frag != "" and json.loads(urllib.parse.unquote(frag)) == state)
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
