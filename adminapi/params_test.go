package adminapi

import (
	"errors"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"
)

// paramsReq exercises every supported parameter type.
type paramsReq struct {
	Slug  string        `path:"slug" json:"-"`
	ID    string        `path:"id" json:"-"`
	From  time.Time     `query:"from" json:"-"`
	Step  time.Duration `query:"step" json:"-"`
	Limit int64         `query:"limit" json:"-"`
}

var paramsOp = Operation{ID: "adminTestParams", Method: methodGet, Path: "/api/admin/things/:slug/items/:id",
	Request: typeOf[paramsReq](), Response: typeOf[Fleet](), Status: 200, Summary: "test"}

// TestParamsRoundTrip: what the client encodes (path escaped, zero query
// values left out) the server decodes back to the same request value.
func TestParamsRoundTrip(t *testing.T) {
	cases := []struct {
		name    string
		req     paramsReq
		wantURL string
	}{
		{"all", paramsReq{Slug: "demo-harbor", ID: "dep 1/x", From: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC), Step: 5 * time.Minute, Limit: 7},
			"/api/admin/things/demo-harbor/items/dep%201%2Fx?from=2026-12-01T10%3A00%3A00Z&limit=7&step=5m0s"},
		{"path only", paramsReq{Slug: "a1", ID: "b"}, "/api/admin/things/a1/items/b"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			u, err := paramsOp.requestURL(EncodeParams(tc.req))
			if err != nil || u != tc.wantURL {
				t.Fatalf("requestURL = %q, %v; want %q", u, err, tc.wantURL)
			}
			parsed, err := url.Parse(u)
			if err != nil {
				t.Fatal(err)
			}
			segs := strings.Split(parsed.Path, "/") // decoded, as the router sees it
			path := map[string]string{"slug": segs[4], "id": segs[6]}
			if tc.req.ID == "dep 1/x" {
				path["id"] = "dep 1/x" // the router matches the escaped segment as one
			}
			var got paramsReq
			if err := DecodeParams(paramsOp, &got, func(n string) string { return path[n] }, parsed.Query()); err != nil {
				t.Fatalf("DecodeParams: %v", err)
			}
			if !reflect.DeepEqual(got, tc.req) {
				t.Errorf("decoded %+v, want %+v", got, tc.req)
			}
		})
	}
}

// TestDecodeParamsIsStrict: unknown and repeated query parameters and
// values that do not parse are *ParamError, whose message never contains
// the value sent.
func TestDecodeParamsIsStrict(t *testing.T) {
	const secret = "SECRETVALUE"
	path := func(n string) string { return map[string]string{"slug": "demo", "id": "d"}[n] }
	cases := []struct {
		name, query, want string
	}{
		{"unknown", "bogus=" + secret, "unknown query parameter; this operation takes from, step, limit"},
		{"unknown name echo", secret + "=1", "unknown query parameter"},
		{"repeated", "step=5m&step=10m", "parameter step is given more than once"},
		{"bad time", "from=" + secret, "parameter from must be an RFC 3339 time"},
		{"bad duration", "step=" + secret, "parameter step must be a duration"},
		{"bad int", "limit=" + secret, "parameter limit must be a decimal integer"},
		{"empty", "step=", "parameter step is empty"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			q, err := url.ParseQuery(tc.query)
			if err != nil {
				t.Fatal(err)
			}
			var got paramsReq
			err = DecodeParams(paramsOp, &got, path, q)
			var pe *ParamError
			if !errors.As(err, &pe) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("DecodeParams(%s) = %v; want a *ParamError containing %q", tc.query, err, tc.want)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error %q echoes the value", err)
			}
		})
	}
	t.Run("no parameters", func(t *testing.T) {
		op, _ := Lookup(OpListFleet)
		err := DecodeParams(op, nil, nil, url.Values{"x": {"1"}})
		if err == nil || !strings.Contains(err.Error(), "takes no query parameters") {
			t.Errorf("DecodeParams on adminListFleet with ?x=1 = %v", err)
		}
		if err := DecodeParams(op, nil, nil, url.Values{}); err != nil {
			t.Errorf("DecodeParams on adminListFleet without a query = %v", err)
		}
	})
}

// TestRequestURLRefusesBadParams: the client refuses a parameter the
// operation does not take and a missing path parameter before sending.
func TestRequestURLRefusesBadParams(t *testing.T) {
	cases := []struct {
		name   string
		params Params
		want   string
	}{
		{"unknown", Params{"slug": "a", "id": "b", "nope": "1"}, `takes no parameter "nope"`},
		{"missing path", Params{"slug": "a"}, `needs path parameter "id"`},
		{"empty path", Params{"slug": "a", "id": ""}, `needs path parameter "id"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := paramsOp.requestURL(tc.params); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("requestURL(%v) = %v; want %q", tc.params, err, tc.want)
			}
		})
	}
}

// TestCheckParamTable: the table check catches a path segment without a
// field, a parameter that is also a body field, an unsupported type, a GET
// with body fields, a path parameter with rules but no `refuse` tag, and a
// `refuse` tag that is not "STATUS code".
func TestCheckParamTable(t *testing.T) {
	type noJSONDash struct {
		Slug string `path:"slug"`
	}
	type floatParam struct {
		Slug string  `path:"slug" json:"-"`
		X    float64 `query:"x" json:"-"`
	}
	type getWithBody struct {
		Slug string `path:"slug" json:"-"`
		Name string `json:"name"`
	}
	type pathRulesNoRefusal struct {
		Slug string `path:"slug" json:"-" schema:"pattern=slug"`
	}
	type badRefusal struct {
		Slug string `path:"slug" json:"-" schema:"pattern=slug" refuse:"not_found"`
	}
	type refusalNot4xx struct {
		Slug string `path:"slug" json:"-"`
		N    int64  `query:"n" json:"-" schema:"maximum=3" refuse:"500 oops"`
	}
	cases := []struct {
		name string
		op   Operation
		want string
	}{
		{"path rules without refusal", Operation{Method: methodGet, Path: "/api/admin/x/:slug", Request: typeOf[pathRulesNoRefusal]()}, "no `refuse` tag"},
		{"refusal without status", Operation{Method: methodGet, Path: "/api/admin/x/:slug", Request: typeOf[badRefusal]()}, "STATUS code"},
		{"refusal not a 4xx", Operation{Method: methodGet, Path: "/api/admin/x/:slug", Request: typeOf[refusalNot4xx]()}, "STATUS code"},
		{"segment without field", Operation{Method: methodGet, Path: "/api/admin/x/:slug"}, "path segment :slug has no request field"},
		{"no json dash", Operation{Method: methodGet, Path: "/api/admin/x/:slug", Request: typeOf[noJSONDash]()}, `needs`},
		{"float", Operation{Method: methodGet, Path: "/api/admin/x/:slug", Request: typeOf[floatParam]()}, "unsupported type"},
		{"get with body", Operation{Method: methodGet, Path: "/api/admin/x/:slug", Request: typeOf[getWithBody]()}, "parameters only"},
		{"field without segment", Operation{Method: methodGet, Path: "/api/admin/x", Request: typeOf[paramsReq]()}, "is not a segment"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.op.checkParamTable(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("checkParamTable = %v; want %q", err, tc.want)
			}
		})
	}
	if err := paramsOp.checkParamTable(); err != nil {
		t.Errorf("checkParamTable on a good operation = %v", err)
	}
}
