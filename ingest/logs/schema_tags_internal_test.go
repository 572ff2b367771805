package logs

import (
	"reflect"
	"testing"

	"github.com/chalupa-run/chalupa/internal/apischema"
	"github.com/chalupa-run/chalupa/protocol"
)

// TestChunkTagsAreTheConstants: a chunk's size tag allows 1 to
// protocol.DefaultMaxChunkBytes (the bound a server's own limit defaults
// to and never exceeds), and seq 0 to 2^40.
func TestChunkTagsAreTheConstants(t *testing.T) {
	f, _ := reflect.TypeFor[protocol.ChunkV1]().FieldByName("Size")
	if r := apischema.RulesOf(f.Tag); !r.Required || *r.Minimum != 1 || *r.Maximum != protocol.DefaultMaxChunkBytes {
		t.Fatalf("size tag %+v; want required, 1..%d", r, protocol.DefaultMaxChunkBytes)
	}
	f, _ = reflect.TypeFor[protocol.ChunkV1]().FieldByName("Seq")
	if r := apischema.RulesOf(f.Tag); r.Required || *r.Minimum != 0 || *r.Maximum != 1<<40 {
		t.Fatalf("seq tag %+v; want 0..2^40", r)
	}
}
