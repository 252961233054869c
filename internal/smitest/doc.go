// Package smitest is test equipment for memtrack's rocm_smi tests, built
// with -tags rocm: the library's list calls made with a buffer of the
// test's size, so that a test can see the resize protocol itself (the
// status and count a too-small buffer gets), which internal/rocmsmi hides
// behind its loop. It calls the library the process loaded (dlopen with
// RTLD_NOLOAD of internal/rocmsmi's names), so rocmsmi.Open must have
// succeeded first. The library never imports it.
package smitest
