#!/usr/bin/env python3
"""k8s_check.py - the Kubernetes manifests of deploy/k8s (docs/deploy.md)
checked offline with the Python standard library (kubectl's client dry
run needs an API server, so it cannot serve here).

Usage: k8s_check.py BUILD_DIR SOURCE_DIR

The manifests are read with a small parser of the YAML they use (block
mappings and sequences, plain and quoted scalars, flow lists of scalars,
comments, `---`); when PyYAML happens to be installed, its reading must be
the same. Checks:
- every object has apiVersion, kind, metadata.name and the fields its kind
  needs (spec, or data for a Secret), with an apiVersion known for its kind;
- every Deployment and StatefulSet selector matches its pod template's
  labels, every Service selector matches some pod template, a
  StatefulSet's serviceName is a headless Service (clusterIP None);
- ports: each --listen/--results/--weights/--http port of a container's flags is a
  named containerPort, every Service targetPort and probe port names one;
  the worker dials the coordinator's Service by name at its control port;
- every Secret and PersistentVolumeClaim a pod mounts is in the manifests,
  with the key it mounts, and every flag file path is under a mount;
- the worker's memory request covers its --memory budget, its cpu request
  its --threads, and the coordinator waits for (--min-workers) at most the
  StatefulSet's replicas;
- every flag is one the binary's --help lists.
Prints one line per check; exit 1 when one fails."""

import ast
import glob
import os
import re
import subprocess
import sys

BUILD = os.path.abspath(sys.argv[1])
SRC = os.path.abspath(sys.argv[2])
K8S = os.path.join(SRC, "deploy", "k8s")
BINARIES = {"/usr/local/bin/strata-coordinator": os.path.join(BUILD, "coordinator",
                                                              "strata-coordinator"),
            "/usr/local/bin/strata-worker": os.path.join(BUILD, "worker", "strata-worker")}
API = {"Deployment": "apps/v1", "StatefulSet": "apps/v1", "Service": "v1", "Secret": "v1",
       "PersistentVolumeClaim": "v1"}
UNITS = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "k": 1 << 10,
         "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}  # --memory's are binary (common/base/units.h)


# ---- a parser of the YAML subset the manifests use ----

def scalar(s):
    s = s.strip()
    if s in ("", "~", "null"):
        return None
    if s in ("true", "false"):
        return s == "true"
    if s == "{}":
        return {}
    if s == "[]":
        return []
    if s[0] == "[" and s[-1] == "]":
        return [scalar(x) for x in s[1:-1].split(",")]
    if s[0] in "'\"":
        return ast.literal_eval(s) if s[0] == '"' else s[1:-1].replace("''", "'")
    if re.fullmatch(r"0[0-7]+", s):  # YAML 1.1 octal (defaultMode: 0400)
        return int(s, 8)
    if re.fullmatch(r"-?[0-9]+", s):
        return int(s)
    return s


def strip_comment(line):
    out, q = [], None
    for i, ch in enumerate(line):
        if q:
            q = None if ch == q else q
        elif ch in "'\"":
            q = ch
        elif ch == "#" and (i == 0 or line[i - 1] in " \t"):
            break
        out.append(ch)
    return "".join(out).rstrip()


def parse_block(lines, i, indent):
    """The node whose lines start at lines[i] with this indent; (node, next i)."""
    if lines[i][1].startswith("- ") or lines[i][1] == "-":
        seq = []
        while i < len(lines) and lines[i][0] == indent and lines[i][1][:1] == "-":
            rest = lines[i][1][1:].lstrip()
            if rest == "":
                node, i = parse_block(lines, i + 1, lines[i + 1][0])
            elif re.match(r"[A-Za-z0-9_.\-/]+:( |$)", rest):
                # a mapping whose first key sits on the dash line
                sub = [(indent + 2, rest)]
                j = i + 1
                while j < len(lines) and lines[j][0] > indent:
                    sub.append(lines[j])
                    j += 1
                node, _ = parse_block(sub, 0, indent + 2)
                i = j
            else:
                node, i = scalar(rest), i + 1
            seq.append(node)
        return seq, i
    mapping = {}
    while i < len(lines) and lines[i][0] == indent:
        m = re.fullmatch(r"([A-Za-z0-9_.\-/]+):(?: (.*))?", lines[i][1])
        assert m, "line %r is not a mapping entry" % lines[i][1]
        key, val = m.group(1), m.group(2)
        if val is None or val.strip() == "":
            if i + 1 < len(lines) and (lines[i + 1][0] > indent or
                                       (lines[i + 1][0] == indent and
                                        lines[i + 1][1][:1] == "-")):
                mapping[key], i = parse_block(lines, i + 1, lines[i + 1][0])
            else:
                mapping[key], i = None, i + 1
        else:
            mapping[key], i = scalar(val), i + 1
    return mapping, i


def load_all(text):
    docs = []
    for chunk in re.split(r"^---\s*$", text, flags=re.M):
        lines = []
        for raw in chunk.split("\n"):
            line = strip_comment(raw)
            if line.strip():
                lines.append((len(line) - len(line.lstrip(" ")), line.strip()))
        if lines:
            node, end = parse_block(lines, 0, lines[0][0])
            assert end == len(lines), "unparsed line %r" % (lines[end][1],)
            docs.append(node)
    return docs


# ---- the checks ----

class Checks:
    def __init__(self):
        self.failed = 0

    def check(self, ok, what):
        print("%s: %s" % ("ok" if ok else "FAIL", what))
        self.failed += not ok


def flag(args, name):
    return args[args.index(name) + 1] if name in args else None


def port_of(addr):
    m = re.search(r":(\d+)$", addr or "")
    return int(m.group(1)) if m else None


def quantity(q):
    m = re.fullmatch(r"([0-9]+)([KMGT]i?|k)?", str(q))
    assert m, "quantity %r" % q
    return int(m.group(1)) * UNITS.get(m.group(2) or "", 1)


def cpu(q):
    q = str(q)
    return int(q[:-1]) / 1000 if q.endswith("m") else float(q)


def help_flags(binary):
    r = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, (binary, r.stderr)
    return set(re.findall(r"--[a-z][a-z0-9-]*", r.stdout))


def main():
    c = Checks()
    objs = []
    for path in sorted(glob.glob(os.path.join(K8S, "*.yaml"))):
        with open(path) as f:
            text = f.read()
        docs = load_all(text)
        try:
            import yaml  # optional: a second reading of the same text
            c.check([d for d in yaml.safe_load_all(text) if d is not None] == docs,
                    "%s: PyYAML reads what this parser reads" % os.path.basename(path))
        except ImportError:
            pass
        for d in docs:
            objs.append((os.path.basename(path), d))
    by = {}
    for f, o in objs:
        kind, name = o.get("kind"), (o.get("metadata") or {}).get("name")
        need = "data" if kind == "Secret" else "spec"
        c.check(kind in API and o.get("apiVersion") == API[kind] and name and need in o,
                "%s: %s %s: apiVersion %s, metadata.name, %s" % (f, kind, name,
                                                                 o.get("apiVersion"), need))
        by[(kind, name)] = o
    pods = {}
    for (kind, name), o in by.items():
        if kind in ("Deployment", "StatefulSet"):
            sel = o["spec"]["selector"]["matchLabels"]
            labels = o["spec"]["template"]["metadata"]["labels"]
            c.check(all(labels.get(k) == v for k, v in sel.items()),
                    "%s %s: selector %s matches the template's labels" % (kind, name, sel))
            pods[(kind, name)] = o["spec"]["template"]
    for (kind, name), o in by.items():
        if kind == "Service":
            sel = o["spec"]["selector"]
            owners = [k for k, t in pods.items()
                      if all(t["metadata"]["labels"].get(a) == b for a, b in sel.items())]
            c.check(len(owners) == 1, "Service %s: selector %s matches %s" % (name, sel, owners))
            if owners:
                named = {p["name"]: p["containerPort"]
                         for ct in pods[owners[0]]["spec"]["containers"] for p in ct["ports"]}
                for p in o["spec"]["ports"]:
                    c.check(p["targetPort"] in named or p["targetPort"] in named.values(),
                            "Service %s: port %s -> %s, a container port of %s"
                            % (name, p["port"], p["targetPort"], owners[0][1]))
        if kind == "StatefulSet":
            svc = by.get(("Service", o["spec"]["serviceName"]))
            c.check(svc is not None and svc["spec"].get("clusterIP") == "None",
                    "StatefulSet %s: serviceName %s is a headless Service"
                    % (name, o["spec"]["serviceName"]))
    args_of = {}
    for (kind, name), t in pods.items():
        spec = t["spec"]
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for ct in spec["containers"]:
            args = ct.get("args", [])
            binary = ct["command"][0]
            args_of[name] = (ct, args)
            ports = {p["name"]: p["containerPort"] for p in ct["ports"]}
            for fl in ("--listen", "--results", "--weights", "--http"):
                if fl in args:
                    c.check(port_of(flag(args, fl)) in ports.values(),
                            "%s: %s %s is a container port %s" % (name, fl, flag(args, fl), ports))
            for pr in ("readinessProbe", "livenessProbe"):
                if pr in ct:
                    p = ct[pr].get("httpGet") or ct[pr].get("tcpSocket")
                    c.check(p["port"] in ports or p["port"] in ports.values(),
                            "%s: %s on port %s%s" % (name, pr, p["port"], p.get("path", "")))
            mounts = {m["mountPath"]: m for m in ct.get("volumeMounts", [])}
            for mp, m in mounts.items():
                v = volumes.get(m["name"])
                ok = v is not None and m.get("readOnly") is True
                if v and "emptyDir" in v:  # writable only as the weights cache (--cache-dir)
                    ok = "--cache-dir" in args and flag(args, "--cache-dir") == mp
                if v and "secret" in v:
                    sec = by.get(("Secret", v["secret"]["secretName"]))
                    ok = ok and sec is not None and all(
                        it["key"] in (sec.get("data") or {}) for it in v["secret"]["items"])
                if v and "persistentVolumeClaim" in v:
                    ok = ok and ("PersistentVolumeClaim",
                                 v["persistentVolumeClaim"]["claimName"]) in by
                c.check(ok, "%s: %s mounted read-only from %s, which the manifests define"
                        % (name, mp, v and {k: x for k, x in v.items() if k != "name"}))
            for fl in ("--model", "--cluster-key", "--api-key-file"):
                if fl in args:
                    c.check(any(flag(args, fl).startswith(mp + "/") for mp in mounts),
                            "%s: %s %s lies under a mount" % (name, fl, flag(args, fl)))
            known = help_flags(BINARIES[binary])
            used = {a for a in args if a.startswith("--")}
            c.check(used <= known, "%s: flags %s are in %s --help (unknown: %s)"
                    % (name, " ".join(sorted(used)), os.path.basename(binary),
                       sorted(used - known)))
    wct, wargs = args_of["strata-worker"]
    cct, cargs = args_of["strata-coordinator"]
    coord_svc = by[("Service", "strata-coordinator")]
    m = re.fullmatch(r"tcp://([a-z0-9-]+):(\d+)", flag(wargs, "--coordinator"))
    svc_ports = {p["port"] for p in coord_svc["spec"]["ports"]}
    c.check(m and m.group(1) == "strata-coordinator" and int(m.group(2)) in svc_ports and
            int(m.group(2)) == port_of(flag(cargs, "--listen")),
            "the workers dial %s: the coordinator's Service, at its --listen port"
            % flag(wargs, "--coordinator"))
    wm = re.fullmatch(r"tcp://([a-z0-9-]+):(\d+)", flag(wargs, "--weights-from") or "")
    c.check("--model" in wargs or (
        wm and wm.group(1) == "strata-coordinator" and int(wm.group(2)) in svc_ports and
        int(wm.group(2)) == port_of(flag(cargs, "--weights")) and
        port_of(flag(cargs, "--weights")) != port_of(flag(cargs, "--results"))),
        "the workers stream their weights from %s: the coordinator's Service, at its --weights "
        "port (not its --results port)" % flag(wargs, "--weights-from"))
    c.check(coord_svc["spec"].get("publishNotReadyAddresses") is True and
            flag(cargs, "--advertise") == "strata-coordinator" and
            port_of(flag(cargs, "--results")) in svc_ports,
            "results reach the coordinator by its Service (--advertise, --results port), "
            "also before /health is ready")
    budget = quantity(flag(wargs, "--memory"))
    req = wct["resources"]["requests"]
    c.check(quantity(req["memory"]) >= budget and
            quantity(wct["resources"]["limits"]["memory"]) >= quantity(req["memory"]),
            "worker memory request %s >= --memory %s, limit %s above it"
            % (req["memory"], flag(wargs, "--memory"), wct["resources"]["limits"]["memory"]))
    c.check(cpu(req["cpu"]) >= int(flag(wargs, "--threads")),
            "worker cpu request %s >= --threads %s" % (req["cpu"], flag(wargs, "--threads")))
    replicas = by[("StatefulSet", "strata-worker")]["spec"]["replicas"]
    c.check(int(flag(cargs, "--min-workers")) <= replicas,
            "--min-workers %s <= %d worker replicas" % (flag(cargs, "--min-workers"), replicas))
    print("%d objects; %s" % (len(objs), "FAILED" if c.failed else "passed"))
    return 1 if c.failed else 0


if __name__ == "__main__":
    sys.exit(main())
