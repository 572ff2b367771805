package daemon

import (
	"context"
	"strings"
	"testing"

	"github.com/chalupa-run/chalupa/adminapi"
)

// TestOperationsRefuseGaps: an operation of the table without a handler
// makes complete (and so newServer and the daemon's start) fail, naming it.
func TestOperationsRefuseGaps(t *testing.T) {
	o := newOperations()
	(&fleetHandlers{}).register(o)
	err := o.complete()
	if err == nil {
		t.Fatal("complete() = nil with most operations unregistered")
	}
	for _, op := range adminapi.Operations {
		if want := op.ID != adminapi.OpListFleet; strings.Contains(err.Error(), op.ID) != want {
			t.Errorf("error %q: mentions %s = %v, want %v", err, op.ID, !want, want)
		}
	}
}

// TestHandleOpPanics: registering an operation twice, an unknown one, or a
// handler whose types differ from the table's is a programming mistake that
// stops the daemon at start.
func TestHandleOpPanics(t *testing.T) {
	list := func(context.Context, none) (adminapi.Fleet, error) { return adminapi.Fleet{}, nil }
	cases := []struct {
		name string
		f    func(o *operations)
	}{
		{"duplicate", func(o *operations) { handleOp(o, adminapi.OpListFleet, list); handleOp(o, adminapi.OpListFleet, list) }},
		{"unknown operation", func(o *operations) { handleOp(o, "adminNoSuchThing", list) }},
		{"wrong response type", func(o *operations) { handleOp(o, adminapi.OpGetStatus, list) }},
		{"wrong request type", func(o *operations) {
			handleOp(o, adminapi.OpCreateEnvironment, func(context.Context, none) (adminapi.Environment, error) {
				return adminapi.Environment{}, nil
			})
		}},
		{"body for a GET", func(o *operations) {
			handleOp(o, adminapi.OpListFleet, func(context.Context, adminapi.IssueIngestKeyRequest) (adminapi.Fleet, error) {
				return adminapi.Fleet{}, nil
			})
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			tc.f(newOperations())
		})
	}
}

// TestRouteGroupsOwnTheirPaths: a path registered in a group that does not
// own it panics, so an admin route cannot land on the public group (or a
// signed one on the admin group) by accident.
func TestRouteGroupsOwnTheirPaths(t *testing.T) {
	cases := []struct{ group, path string }{
		{GroupPublic, "/api/admin/status"},
		{GroupProbe, "/api/admin/fleet"},
		{GroupAdmin, "/api/ingest/heartbeat"},
		{GroupIngest, "/admin-api/pulumi-state/cache"},
		{GroupAdmin, "/api/adminx"},
		{GroupPublic, "/somewhere/else"},
	}
	for _, tc := range cases {
		t.Run(tc.group+" "+tc.path, func(t *testing.T) {
			s := &Server{}
			s.router = newRouter(s)
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			s.handle(tc.group, "GET", tc.path, nil)
		})
	}
}
