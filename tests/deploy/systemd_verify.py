#!/usr/bin/env python3
"""systemd_verify.py - the systemd units of deploy/systemd (docs/deploy.md)
checked offline, against the binaries of the build tree.

Usage: systemd_verify.py BUILD_DIR SOURCE_DIR

- `systemd-analyze verify --man=no` on strata-coordinator.service, the
  template strata-worker@.service and an instance of it, with ExecStart's
  /usr/local/bin/ pointed at a folder of links to the built binaries (verify
  requires the executables): it must exit 0 and print nothing (it only warns
  about an unknown key or a bad value, so a warning is a failure here);
- `systemd-analyze security --offline=yes --threshold=20`: an exposure
  level of at most 2.0 ("OK") for each unit;
- the hardening the deployment promises is written in both units
  (DynamicUser, ProtectSystem=strict, NoNewPrivileges, PrivateTmp, the
  cluster key through LoadCredential, an EnvironmentFile);
- every variable the units use is set in the example strata.env, and every
  flag of ExecStart and of the example's *_FLAGS is one the binary's --help
  lists.
Exit 77 (skipped) only when systemd-analyze is not installed (Debian's
package `systemd`), saying so."""

import os
import re
import shutil
import subprocess
import sys
import tempfile

BUILD = os.path.abspath(sys.argv[1])
SRC = os.path.abspath(sys.argv[2])
UNITS = os.path.join(SRC, "deploy", "systemd")
BINDIR = "/usr/local/bin/"
BINARIES = {"strata-coordinator": os.path.join(BUILD, "coordinator", "strata-coordinator"),
            "strata-worker": os.path.join(BUILD, "worker", "strata-worker")}
HARDENING = ["DynamicUser=yes", "ProtectSystem=strict", "NoNewPrivileges=yes", "PrivateTmp=yes",
             "LoadCredential=cluster-key:/etc/strata/cluster.key",
             "EnvironmentFile=/etc/strata/strata.env"]
EXPOSURE_MAX = "20"  # systemd-analyze's threshold: tenths of the 0..10 exposure level
INSTANCE = "strata-worker@0.service"


def unit_text(name):
    with open(os.path.join(UNITS, name)) as f:
        return f.read()


def exec_start(text):
    """ExecStart's command line, continuation lines joined."""
    m = re.search(r"^ExecStart=((?:.*\\\n)*.*)$", text, re.M)
    assert m, "no ExecStart"
    return re.sub(r"\\\n\s*", "", m.group(1))


def env_example():
    vals = {}
    with open(os.path.join(UNITS, "strata.env")) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                k, _, v = line.partition("=")
                vals[k] = v
    return vals


def help_flags(binary):
    r = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, (binary, r.stderr)
    return set(re.findall(r"--[a-z][a-z0-9-]*", r.stdout))


def run(argv):
    r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    return r.returncode, (r.stdout + r.stderr).strip()


def main():
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        print("SKIP: systemd-analyze is not installed (Debian's package `systemd` provides it)")
        return 77
    failed = 0
    env = env_example()
    units = ["strata-coordinator.service", "strata-worker@.service"]
    for name in units:
        text = unit_text(name)
        missing = [h for h in HARDENING if not re.search("^" + re.escape(h) + "$", text, re.M)]
        cmd = exec_start(text)
        prog = cmd.split()[0]
        flags = set(re.findall(r"(?<!\S)--[a-z][a-z0-9-]*", cmd))
        base = os.path.basename(prog)
        for k in re.findall(r"\$\{?([A-Z_]+)\}?", cmd):
            if k not in env:
                print("FAIL: %s uses $%s, which strata.env does not set" % (name, k))
                failed += 1
            elif k.endswith("_FLAGS"):
                flags |= set(re.findall(r"(?<!\S)--[a-z][a-z0-9-]*", env[k]))
        unknown = sorted(flags - help_flags(BINARIES[base])) if base in BINARIES else ["?"]
        if missing or not prog.startswith(BINDIR) or unknown:
            print("FAIL: %s: hardening missing %s; ExecStart %s; flags not in %s --help: %s"
                  % (name, missing, prog, base, unknown))
            failed += 1
        else:
            print("ok: %s: hardening %s; ExecStart %s with flags %s"
                  % (name, ", ".join(h.split("=")[0] for h in HARDENING), prog,
                     " ".join(sorted(flags))))
    tmp = tempfile.mkdtemp(prefix="strata-systemd-")
    try:
        bindir = os.path.join(tmp, "bin")
        os.mkdir(bindir)
        for base, path in BINARIES.items():
            os.symlink(path, os.path.join(bindir, base))
        paths = []
        for name in units + [INSTANCE]:
            src = "strata-worker@.service" if name == INSTANCE else name
            dst = os.path.join(tmp, name)
            with open(dst, "w") as f:
                f.write(unit_text(src).replace(BINDIR, bindir + "/"))
            paths.append(dst)
        rc, out = run([analyze, "verify", "--man=no"] + paths)
        if rc != 0 or out:
            print("FAIL: systemd-analyze verify exited %d:\n%s" % (rc, out))
            failed += 1
        else:
            print("ok: systemd-analyze verify: %s: no error, no warning"
                  % ", ".join(os.path.basename(p) for p in paths))
        for p in paths:
            rc, out = run([analyze, "security", "--offline=yes", "--no-pager",
                           "--threshold=" + EXPOSURE_MAX, p])
            level = re.search(r"Overall exposure level for \S+: (\S+ \S+)", out)
            if rc != 0 or level is None:
                print("FAIL: systemd-analyze security %s exited %d (threshold %s):\n%s"
                      % (os.path.basename(p), rc, EXPOSURE_MAX, out[-2000:]))
                failed += 1
            else:
                print("ok: systemd-analyze security %s: exposure %s"
                      % (os.path.basename(p), level.group(1)))
    finally:
        shutil.rmtree(tmp)
    print("%s" % ("FAILED" if failed else "passed"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
