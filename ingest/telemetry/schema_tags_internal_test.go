package telemetry

import (
	"reflect"
	"testing"

	"github.com/chalupa-run/chalupa/internal/apischema"
	"github.com/chalupa-run/chalupa/protocol"
)

// TestSampleCountTagIsTheConstant: a metric's n tag, which the OpenAPI
// document and ValidateWindow read, bounds n at MaxSamplesPerWindow.
func TestSampleCountTagIsTheConstant(t *testing.T) {
	f, _ := reflect.TypeFor[protocol.AggV1]().FieldByName("N")
	r := apischema.RulesOf(f.Tag)
	if !r.Required || r.Minimum == nil || *r.Minimum != 1 || r.Maximum == nil || *r.Maximum != MaxSamplesPerWindow {
		t.Fatalf("n tag %+v; want required, 1..%d", r, MaxSamplesPerWindow)
	}
}
