// Package lazyre is a regular expression compiled on its first use rather
// than at package initialisation: every command of a chalupa binary
// initialises every package that binary links, and a validation pattern
// with a counted repetition ({0,127}) compiles into a program of thousands
// of instructions (docs/operations.md, "Footprint").
package lazyre

import (
	"regexp"
	"sync"
)

// Regexp is a pattern compiled by its first method call. The zero value is
// not usable: build one with New. Safe for concurrent use.
type Regexp struct {
	pattern string
	once    sync.Once
	re      *regexp.Regexp
}

// New returns pattern, to be compiled on first use. An invalid pattern
// panics on that first use, as regexp.MustCompile would at start: each
// package's tests exercise its patterns.
func New(pattern string) *Regexp { return &Regexp{pattern: pattern} }

// Regexp returns the compiled expression, compiling it once. It panics if
// the pattern does not compile.
func (r *Regexp) Regexp() *regexp.Regexp {
	r.once.Do(func() { r.re = regexp.MustCompile(r.pattern) })
	return r.re
}

// compiled reports whether the pattern has been compiled (for tests).
func (r *Regexp) compiled() bool { return r.re != nil }

// String returns the source pattern, without compiling it.
func (r *Regexp) String() string { return r.pattern }

// MatchString is regexp.Regexp.MatchString.
func (r *Regexp) MatchString(s string) bool { return r.Regexp().MatchString(s) }

// FindStringSubmatch is regexp.Regexp.FindStringSubmatch.
func (r *Regexp) FindStringSubmatch(s string) []string { return r.Regexp().FindStringSubmatch(s) }

// FindAllStringSubmatch is regexp.Regexp.FindAllStringSubmatch.
func (r *Regexp) FindAllStringSubmatch(s string, n int) [][]string {
	return r.Regexp().FindAllStringSubmatch(s, n)
}

// ReplaceAllString is regexp.Regexp.ReplaceAllString, compiling on first use.
func (r *Regexp) ReplaceAllString(src, repl string) string {
	return r.Regexp().ReplaceAllString(src, repl)
}

// ReplaceAllStringFunc is regexp.Regexp.ReplaceAllStringFunc.
func (r *Regexp) ReplaceAllStringFunc(src string, repl func(string) string) string {
	return r.Regexp().ReplaceAllStringFunc(src, repl)
}
