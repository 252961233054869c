// Package bytesize writes byte counts in IEC units for memtrack's tables:
// the summary and statistics of the root package and the page of package
// web use the one rounding.
package bytesize
