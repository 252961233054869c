package memtrack

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// checkName says what is wrong with the name of a category or a mark (what),
// if anything: it must be 1 to maxLen bytes of UTF-8 without control
// characters.
func checkName(what, name string, maxLen int) error {
	switch {
	case name == "":
		return fmt.Errorf("empty %s name", what)
	case len(name) > maxLen:
		return fmt.Errorf("%s name of %d bytes, longer than %d", what, len(name), maxLen)
	case printableASCII(name):
		return nil
	case !utf8.ValidString(name):
		return fmt.Errorf("%s name %q is not UTF-8", what, name)
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		return fmt.Errorf("%s name %q holds a control character", what, name)
	}
	return nil
}

// printableASCII reports whether s is ASCII without control characters:
// the usual name, checked without decoding it.
func printableASCII(s string) bool {
	for i := range len(s) {
		if c := s[i]; c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}
