// Package rendertest holds what the tests of the renderers (packages prom,
// otelmetric, web, pprof, trace and oomdump) share: the CPU put in a known
// state, a test run in a process of its own where it must change what the
// whole process sees, and, with -tags cuda, renderings made while the
// program captures a CUDA graph (DuringCapture). Only tests import it.
package rendertest
