"""Tests of tools/check_layers.py: the real tree passes, and each kind of
wrong include in a small tree is reported with its file and line."""
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_layers  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def tree(files):
    d = tempfile.mkdtemp()
    for path, text in files.items():
        full = os.path.join(d, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w") as f:
            f.write(text)
    return d


class CheckLayersTest(unittest.TestCase):
    def test_the_tree_passes(self):
        self.assertEqual(check_layers.check_tree(ROOT), [])

    def test_downward_includes_pass(self):
        d = tree({
            "runtime/device.h": '#include "compiler/ir/shape.h"\n#include "base/half.h"\n',
            "runtime/cpu/cpu.cc": '#include "runtime/host/program.h"\n',
            "server/service.cc": '#include "runtime/backend.h"\n#include "kiln/v1/hlo.pb.h"\n',
            "embedded/e.cc": '#include "server/service.h"\n#include "client/client.h"\n',
        })
        self.assertEqual(check_layers.check_tree(d), [])

    def assertReported(self, files, path, needle):
        problems = check_layers.check_tree(tree(files))
        self.assertEqual(len(problems), 1, problems)
        self.assertTrue(problems[0].startswith(path + ":"), problems)
        self.assertIn(needle, problems[0])

    def test_ir_including_runtime_fails(self):
        self.assertReported({"compiler/ir/shape.h": '#include <vector>\n#include "runtime/device.h"\n'},
                            "compiler/ir/shape.h:2", "runtime/device.h")

    def test_base_including_ir_fails(self):
        self.assertReported({"base/half.h": '#include "compiler/ir/shape.h"\n'},
                            "base/half.h:1", "compiler/ir/shape.h")

    def test_server_naming_a_backend_fails(self):
        self.assertReported({"server/service.cc": '#include "runtime/cpu/cpu_backend.h"\n'},
                            "server/service.cc:1", "runtime/cpu/cpu_backend.h")

    def test_client_including_server_fails(self):
        self.assertReported({"client/client.cc": '#include "server/service.h"\n'},
                            "client/client.cc:1", "server/service.h")

    def test_backend_including_another_backend_fails(self):
        self.assertReported({"runtime/tpusim/t.cc": '#include "runtime/cpu/cpu_backend.h"\n'},
                            "runtime/tpusim/t.cc:1", "runtime/cpu/cpu_backend.h")

    def test_hal_including_a_backend_fails(self):
        self.assertReported({"runtime/device.cc": '#include "runtime/host/host_buffer.h"\n'},
                            "runtime/device.cc:1", "runtime/host/host_buffer.h")

    def test_grpc_outside_the_transports_fails(self):
        self.assertReported({"client/lazy.cc": '#include <grpcpp/grpcpp.h>\n'},
                            "client/lazy.cc:1", "gRPC")

    def test_tests_may_drive_code_from_above(self):
        d = tree({"runtime/null/null_backend_test.cc": '#include "server/service.h"\n'})
        self.assertEqual(check_layers.check_tree(d), [])

    def test_main_exits_one_on_a_violation(self):
        d = tree({"client/x.cc": '#include "runtime/device.h"\n'})
        self.assertEqual(check_layers.main(["check_layers.py", d]), 1)
        self.assertEqual(check_layers.main(["check_layers.py", ROOT]), 0)


if __name__ == "__main__":
    unittest.main()
