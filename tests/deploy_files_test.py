#!/usr/bin/env python3
"""Checks the files in deploy/ as far as this machine can without systemd
running, a container engine or a Kubernetes cluster:

- kiln-server.service passes `systemd-analyze verify` (with ExecStart
  pointed at the build's binary and flags file);
- kiln-server.flags names every flag of kiln-server, each line is a known
  flag, and kiln-server starts with it;
- k8s/*.yaml parse, and each object has what its kind needs: selectors that
  match their pods, ports, probes and mounts that refer to what exists,
  ConfigMap and Secret keys that are defined, flags that kiln-server knows;
- Containerfile uses known instructions, copies what deploy/bundle.sh puts
  in a bundle, and runs binaries that exist in one.

Usage: deploy_files_test.py SOURCE_DIR BIN_DIR
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import unittest

import yaml

SRC, BIN = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
DEPLOY = os.path.join(SRC, "deploy")


def read(path):
    with open(path) as f:
        return f.read()


def server_flags():
    out = subprocess.run([os.path.join(BIN, "kiln-server"), "--help"], capture_output=True,
                         text=True, check=True).stdout
    return set(re.findall(r"^\s+--([a-z_0-9]+)\s", out, re.M))


def flag_lines(text):
    """The flag names of the uncommented lines, and of the commented ones."""
    live, commented = [], []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        m = re.match(r"^(#)?--([a-z_0-9]+)(=.*)?$", line)
        if m:
            (commented if m.group(1) else live).append(m.group(2))
        elif not line.startswith("#"):
            raise AssertionError("not a flag or a comment: %r" % line)
    return live, commented


class SystemdUnit(unittest.TestCase):
    def test_verifies(self):
        if shutil.which("systemd-analyze") is None:
            self.skipTest("systemd-analyze is not installed")
        text = read(os.path.join(DEPLOY, "kiln-server.service"))
        self.assertIn("ExecStart=/opt/kiln/bin/kiln-server --flagfile=/etc/kiln/kiln-server.flags",
                      text)
        for option in ("NoNewPrivileges=yes", "ProtectSystem=strict", "User=kiln",
                       "ExecReload=/bin/kill -HUP $MAINPID"):
            self.assertIn(option, text)
        text = text.replace("/opt/kiln/bin/kiln-server", os.path.join(BIN, "kiln-server"))
        text = text.replace("/etc/kiln/kiln-server.flags",
                            os.path.join(DEPLOY, "kiln-server.flags"))
        with tempfile.TemporaryDirectory() as d:
            unit = os.path.join(d, "kiln-server.service")
            with open(unit, "w") as f:
                f.write(text)
            r = subprocess.run(["systemd-analyze", "verify", unit], capture_output=True,
                               text=True)
            # Unknown keys and bad values are printed (with exit code 0).
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertEqual((r.stdout + r.stderr).strip(), "")


class FlagsFile(unittest.TestCase):
    def test_names_every_flag_and_starts_the_server(self):
        path = os.path.join(DEPLOY, "kiln-server.flags")
        live, commented = flag_lines(read(path))
        known = server_flags()
        self.assertTrue(known >= {"listen", "tls_cert", "compile_cache_dir"})
        self.assertEqual(sorted(set(live + commented) - known), [], "unknown flags")
        self.assertEqual(sorted(known - set(live + commented)), [], "flags not in the file")
        with subprocess.Popen([os.path.join(BIN, "kiln-server"), "--flagfile=" + path,
                               "--listen=127.0.0.1:0", "--log_level=warn"],
                              stdout=subprocess.PIPE, text=True) as p:
            try:
                line = p.stdout.readline()
                self.assertTrue(line.startswith("listening on "), line)
            finally:
                p.send_signal(signal.SIGTERM)
                self.assertEqual(p.wait(timeout=30), 0)


class Kubernetes(unittest.TestCase):
    def setUp(self):
        self.objects = []
        folder = os.path.join(DEPLOY, "k8s")
        for name in sorted(os.listdir(folder)):
            if name.endswith(".yaml"):
                self.objects += [o for o in yaml.safe_load_all(read(os.path.join(folder, name)))
                                 if o is not None]
        self.by_kind = {}
        for o in self.objects:
            for field in ("apiVersion", "kind", "metadata"):
                self.assertIn(field, o)
            self.assertTrue(o["metadata"].get("name"))
            self.by_kind.setdefault(o["kind"], {})[o["metadata"]["name"]] = o

    def test_kinds(self):
        self.assertEqual(sorted(self.by_kind), ["ConfigMap", "Service", "StatefulSet"])
        api = {"ConfigMap": "v1", "Service": "v1", "StatefulSet": "apps/v1"}
        for o in self.objects:
            self.assertEqual(o["apiVersion"], api[o["kind"]])

    def test_statefulset_pods_are_complete(self):
        (sts,) = self.by_kind["StatefulSet"].values()
        spec = sts["spec"]
        labels = spec["template"]["metadata"]["labels"]
        for k, v in spec["selector"]["matchLabels"].items():
            self.assertEqual(labels.get(k), v)
        self.assertIn(spec["serviceName"], self.by_kind["Service"])
        pod = spec["template"]["spec"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        claims = {c["metadata"]["name"] for c in spec.get("volumeClaimTemplates", [])}
        configmaps = self.by_kind["ConfigMap"]
        (container,) = pod["containers"]
        self.assertTrue(container["image"])
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        mounts = {}
        for m in container["volumeMounts"]:
            self.assertTrue(m["name"] in volumes or m["name"] in claims, m)
            mounts[m["mountPath"]] = m["name"]
        for v in volumes.values():
            if "configMap" in v:
                cm = configmaps[v["configMap"]["name"]]
                for item in v["configMap"].get("items", []):
                    self.assertIn(item["key"], cm["data"])
        # Files the flags name live on a mounted volume, under the key the
        # volume gives them.
        flags_arg = [a for a in container["args"] if a.startswith("--flagfile=")]
        self.assertEqual(len(flags_arg), 1)
        flags_path = flags_arg[0].split("=", 1)[1]
        cm_text = self._file_at(flags_path, mounts, volumes)
        live, commented = flag_lines(cm_text)
        self.assertEqual(sorted(set(live + commented) - server_flags()), [])
        for line in cm_text.splitlines():
            m = re.match(r"^--[a-z_]+=(/etc/kiln/[^,\s]+)$", line.strip())
            if m:
                self._file_at(m.group(1), mounts, volumes)
        listen = [l for l in cm_text.splitlines() if l.startswith("--listen=")][0]
        self.assertTrue(listen.endswith(":%d" % ports["grpc"]), listen)
        # Probes run `kiln health` against the gRPC port with a token.
        env = {e["name"]: e.get("value") for e in container.get("env", [])}
        # Variables the arguments use are defined ($(NAME), expanded by
        # Kubernetes), and the arguments are flags kiln-server knows.
        for arg in container["args"]:
            for name in re.findall(r"\$\(([A-Z_]+)\)", arg):
                self.assertIn(name, env, arg)
            self.assertIn(arg.split("=", 1)[0][2:], server_flags() | {"flagfile"}, arg)
        for probe in ("readinessProbe", "livenessProbe"):
            cmd = container[probe]["exec"]["command"]
            self.assertEqual(cmd[:2], ["/opt/kiln/bin/kiln", "health"])
            self.assertIn("--server=127.0.0.1:%d" % ports["grpc"], cmd)
        for var in ("KILN_TOKEN_FILE", "KILN_TLS_CA"):
            self._secret_file(env[var], mounts, volumes)

    def _secret_file(self, path, mounts, volumes):
        folder, name = os.path.split(path)
        volume = volumes[mounts[folder]]
        self.assertIn("secret", volume)
        self.assertIn(name, [i["path"] for i in volume["secret"]["items"]])

    def _file_at(self, path, mounts, volumes):
        folder, name = os.path.split(path)
        self.assertIn(folder, mounts, path)
        volume = volumes.get(mounts[folder], {})
        if "configMap" in volume:
            cm = self.by_kind["ConfigMap"][volume["configMap"]["name"]]
            key = {i["path"]: i["key"] for i in volume["configMap"]["items"]}[name]
            return cm["data"][key]
        if "secret" in volume:
            self.assertIn(name, [i["path"] for i in volume["secret"]["items"]])
        return ""

    def test_service_reaches_the_pods(self):
        (svc,) = self.by_kind["Service"].values()
        (sts,) = self.by_kind["StatefulSet"].values()
        labels = sts["spec"]["template"]["metadata"]["labels"]
        for k, v in svc["spec"]["selector"].items():
            self.assertEqual(labels.get(k), v)
        self.assertEqual(svc["spec"].get("clusterIP"), "None")  # headless: stable pod names
        names = {p["name"] for c in sts["spec"]["template"]["spec"]["containers"]
                 for p in c["ports"]}
        for port in svc["spec"]["ports"]:
            self.assertIn(port["targetPort"], names)


class Containerfile(unittest.TestCase):
    def test_instructions_and_paths(self):
        text = read(os.path.join(DEPLOY, "Containerfile"))
        known = {"FROM", "RUN", "COPY", "USER", "EXPOSE", "VOLUME", "HEALTHCHECK",
                 "ENTRYPOINT", "CMD", "ENV", "WORKDIR", "LABEL", "ARG"}
        logical = re.sub(r"\\\n", " ", text)
        copies = []
        for line in logical.splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            word = line.split()[0]
            self.assertIn(word, known, line)
            if word == "COPY":
                copies.append(line.split()[1:])
        self.assertTrue(logical.lstrip().splitlines()[0].startswith("#"))
        self.assertIn("FROM debian:12", logical)
        bundle = read(os.path.join(DEPLOY, "bundle.sh"))
        for src, dest in copies:
            self.assertTrue(src.startswith("kiln-bundle/"), src)
            rel = src[len("kiln-bundle/"):]
            if rel.startswith("share/kiln/deploy/"):
                name = rel[len("share/kiln/deploy/"):]
                self.assertTrue(os.path.exists(os.path.join(DEPLOY, name)), name)
                self.assertIn("deploy/" + name, bundle)
        for binary in ("kiln-server", "kiln"):
            self.assertIn("/opt/kiln/bin/" + binary, logical)
            self.assertTrue(os.path.exists(os.path.join(BIN, binary)))
        self.assertIn('"health"', logical)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=1)
