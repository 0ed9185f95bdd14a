#!/usr/bin/env python3
"""Tests of translate_launches.py, the step that turns the .cu files of
src/backends/cuda/ into C++ for the host emulation: a launch becomes a call
of the emulator, each __shared__ declaration is followed by the fill of its
variables, a kernel with __launch_bounds__ starts with their check, no
line moves, dynamic shared memory becomes a pointer to the block's, and
what it cannot handle (a launch it cannot parse, a __shared__ that is not a
declaration at the start of its line) stops the build rather than passing
silently.

usage: test_translate.py   (exit 0 when every test passes)
"""
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, HERE)
import translate_launches as tl  # noqa: E402

KERNELS = """\
template <int N>
__global__ void __launch_bounds__(4 * N, 2)
scale(const float* x, float* y,
      int n) {
  __shared__ double sa[N], sb[N];
  alignas(32) __shared__ unsigned char smem[bytes_of(N * 16)];
  // __shared__ in a comment is left alone
  y[threadIdx.x] = x[threadIdx.x] * sa[0] + sb[0] + smem[0];
}

__global__ void plain(float* y) { y[0] = 1.0f; }

__global__ void tiles(float* y) {
  extern __shared__ __align__(32) unsigned char dynamic[];
  extern __shared__ float plain_dynamic[];
  y[0] = dynamic[0] + plain_dynamic[0];
}

void run(const float* x, float* y, cudaStream_t s) {
  scale<32><<<dim3(4, 2), 128, 0, s>>>(x, y,
                                       7);
  plain<<<1, 32>>>();
  tiles<<<1, 32, 50000, s>>>(y);
}
"""


class Translate(unittest.TestCase):
    def setUp(self):
        self.out = tl.translate(KERNELS)
        self.lines = self.out.splitlines()

    def test_no_line_moves(self):
        self.assertEqual(len(self.lines), len(KERNELS.splitlines()))
        self.assertIn("y[threadIdx.x] = x[threadIdx.x]", self.lines[7])
        self.assertIn("void run(", self.lines[18])

    def test_launches_become_calls_of_the_emulator(self):
        self.assertNotIn("<<<", self.out)
        self.assertIn('::dptrain_emu::Launcher("scale<32>", dim3(4, 2), 128, 0, s)(scale<32>, x, y,',
                      self.lines[19])
        self.assertIn('::dptrain_emu::Launcher("plain", 1, 32)(plain)', self.lines[21])
        self.assertIn('::dptrain_emu::Launcher("tiles", 1, 32, 50000, s)(tiles, y)', self.lines[22])

    def test_dynamic_shared_memory_is_the_blocks(self):
        self.assertEqual(self.lines[13], "  unsigned char* dynamic = "
                         "static_cast<unsigned char*>(::dptrain_emu::dynamic_shared());")
        self.assertEqual(self.lines[14], "  float* plain_dynamic = "
                         "static_cast<float*>(::dptrain_emu::dynamic_shared());")
        self.assertNotIn("extern", self.out)

    def test_every_shared_variable_is_filled(self):
        self.assertTrue(self.lines[4].endswith(
            "::dptrain_emu::fresh_shared(&sa, sizeof sa); "
            "::dptrain_emu::fresh_shared(&sb, sizeof sb);"))
        self.assertTrue(self.lines[5].endswith("::dptrain_emu::fresh_shared(&smem, sizeof smem);"))
        self.assertNotIn("fresh_shared", self.lines[6])

    def test_launch_bounds_are_checked_first_in_the_body(self):
        self.assertTrue(self.lines[3].endswith(
            "int n) { ::dptrain_emu::within_launch_bounds(4 * N);"))
        self.assertEqual(self.out.count("within_launch_bounds"), 1)

    def test_what_it_cannot_handle_stops_it(self):
        for bad in ("void f() { extern __shared__ float dynamic[]; }",
                    "extern __shared__ float sized[8];",
                    "void f() { __shared__ float s[4]; }",
                    "k<<<grid>>> (x);\nk<<<1"):
            with self.assertRaises(SystemExit, msg=bad):
                tl.translate(bad)

    def test_the_command_writes_a_line_directive(self):
        with tempfile.TemporaryDirectory() as d:
            src, dst = os.path.join(d, "k.cu"), os.path.join(d, "out", "k.cpp")
            with open(src, "w", encoding="utf-8") as f:
                f.write(KERNELS)
            subprocess.run([sys.executable, os.path.join(HERE, "translate_launches.py"), src, dst],
                           check=True)
            with open(dst, encoding="utf-8") as f:
                self.assertEqual(f.readline(), f'#line 1 "{src}"\n')


if __name__ == "__main__":
    unittest.main()
