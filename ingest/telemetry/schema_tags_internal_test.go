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

// TestMetricRangesAreTheTags: each metric's type in protocol.MetricsV1
// bounds min, max and last by the range of its unit (ranges), and n like
// AggV1: the OpenAPI document's bounds and ValidateWindow's Check are the
// ranges this package stores by.
func TestMetricRangesAreTheTags(t *testing.T) {
	mt := reflect.TypeFor[protocol.MetricsV1]()
	if mt.NumField() != len(ranges) {
		t.Fatalf("%d metrics, %d ranges", mt.NumField(), len(ranges))
	}
	for i := range mt.NumField() {
		f := mt.Field(i)
		t.Run(f.Name, func(t *testing.T) {
			at := f.Type.Elem()
			if !reflect.PointerTo(at).ConvertibleTo(reflect.TypeFor[*protocol.AggV1]()) {
				t.Fatalf("%s is not AggV1 with tags", at)
			}
			for _, name := range []string{"Min", "Max", "Last"} {
				af, _ := at.FieldByName(name)
				r := apischema.RulesOf(af.Tag)
				if r.MinFloat == nil || *r.MinFloat != ranges[i].lo || r.MaxFloat == nil || *r.MaxFloat != ranges[i].hi {
					t.Fatalf("%s.%s tag %v..%v; the range is %g..%g", at.Name(), name, r.MinFloat, r.MaxFloat, ranges[i].lo, ranges[i].hi)
				}
			}
			n, _ := at.FieldByName("N")
			if r := apischema.RulesOf(n.Tag); !r.Required || *r.Minimum != 1 || *r.Maximum != MaxSamplesPerWindow {
				t.Fatalf("%s.N tag %+v; want required, 1..%d", at.Name(), r, MaxSamplesPerWindow)
			}
		})
	}
}

// TestWindowSecondsTagIsTheConstant: windowSeconds' tag allows exactly
// protocol.WindowSeconds.
func TestWindowSecondsTagIsTheConstant(t *testing.T) {
	f, _ := reflect.TypeFor[protocol.WindowV1]().FieldByName("WindowSeconds")
	r := apischema.RulesOf(f.Tag)
	if !r.Required || r.Minimum == nil || *r.Minimum != protocol.WindowSeconds || r.Maximum == nil || *r.Maximum != protocol.WindowSeconds {
		t.Fatalf("windowSeconds tag %+v; want required, exactly %d", r, protocol.WindowSeconds)
	}
}
