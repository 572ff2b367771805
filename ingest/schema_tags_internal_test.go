package ingest

import (
	"reflect"
	"slices"
	"testing"

	"github.com/chalupa-run/chalupa/internal/apischema"
	"github.com/chalupa-run/chalupa/protocol"
)

// TestEventKindsAreTheTag: the lifecycle event's kind enum, which the
// OpenAPI document and validateLifecycleEvent read, lists exactly the
// kinds the ingest path handles (eventKinds).
func TestEventKindsAreTheTag(t *testing.T) {
	f, _ := reflect.TypeFor[protocol.LifecycleEventV1]().FieldByName("Kind")
	tag := slices.Sorted(slices.Values(apischema.RulesOf(f.Tag).Enum))
	var known []string
	for k := range eventKinds {
		known = append(known, k)
	}
	slices.Sort(known)
	if !slices.Equal(tag, known) {
		t.Fatalf("kind tag enum %v; eventKinds %v", tag, known)
	}
}
