package lazyre

import (
	"sync"
	"testing"
)

// TestCompiledOnFirstUse: New compiles nothing; the first match compiles
// once, and concurrent first uses agree.
func TestCompiledOnFirstUse(t *testing.T) {
	r := New(`^[a-z]{1,127}$`)
	if r.compiled() {
		t.Fatal("New compiled the pattern")
	}
	if got := r.String(); got != `^[a-z]{1,127}$` {
		t.Fatalf("String = %q", got)
	}
	if r.compiled() {
		t.Fatal("String compiled the pattern")
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !r.MatchString("abc") || r.MatchString("ABC") {
				t.Error("MatchString disagrees with the pattern")
			}
		}()
	}
	wg.Wait()
	if !r.compiled() {
		t.Fatal("not compiled after use")
	}
	if got := New(`(\d)-(\d)`).FindStringSubmatch("1-2"); len(got) != 3 || got[2] != "2" {
		t.Errorf("FindStringSubmatch = %q", got)
	}
	if got := New(`\d`).FindAllStringSubmatch("1a2", -1); len(got) != 2 {
		t.Errorf("FindAllStringSubmatch = %q", got)
	}
	if got := New(`\d`).ReplaceAllStringFunc("1a2", func(string) string { return "x" }); got != "xax" {
		t.Errorf("ReplaceAllStringFunc = %q", got)
	}
}

// TestInvalidPanicsOnUse: a bad pattern panics where it is first used.
func TestInvalidPanicsOnUse(t *testing.T) {
	r := New(`(`)
	defer func() {
		if recover() == nil {
			t.Error("no panic for an invalid pattern")
		}
	}()
	r.MatchString("x")
}
