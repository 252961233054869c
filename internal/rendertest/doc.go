// Package rendertest holds what the tests of the renderers (packages prom
// and otelmetric) share: the CPU put in a known state, and a test run in a
// process of its own where it must change what the whole process sees.
// Only tests import it.
package rendertest
