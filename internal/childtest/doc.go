// Package childtest runs a test in a process of its own: the test binary
// again, for that test alone, with a variable of the environment naming it,
// and more of the environment where the test needs it. A test runs so where
// it changes what the whole process sees (a device put to use, a driver
// loaded once per process), or where what it tests is read once per process
// (a fake driver's switches), or where it is to stop the process (a fake
// driver that aborts on undefined behaviour, InStoppedChild). Only tests
// import it.
package childtest
