package daemon

import (
	"net/http"
	"strings"

	"github.com/chalupa-run/chalupa/adminapi"
	"github.com/chalupa-run/chalupa/internal/apischema"
)

// checkShape refuses an admin request body that breaks a rule its wire
// type declares in `schema` tags, the same declaration the OpenAPI
// document's request schema is built from (docs/operations.md, "OpenAPI"):
// a slug field answers 400 invalid_slug and a display name 400
// invalid_name, as the handlers did before the tags; any other rule 400
// bad_body. The message names the field and the
// rule, never the value.
func checkShape(req any) error {
	v := apischema.Check(req)
	if v == nil {
		return nil
	}
	switch v.Pattern {
	case "slug":
		return fail(http.StatusBadRequest, "invalid_slug", v.Message())
	case "name":
		return fail(http.StatusBadRequest, "invalid_name", v.Message())
	}
	return fail(http.StatusBadRequest, "bad_body", v.Message())
}

// shapeAnswer is the status and code a refusal for shape answers.
type shapeAnswer struct {
	status int
	code   string
}

// checkShapeAs is checkShape for a body whose handler answered its own
// codes before the tags: the first rule broken, by apischema.Check, is
// answered with byField's entry for its top-level key ("scope" for
// scope.kind, "services" for services[2]), else with other; the message
// names the field and the rule, never the value (docs/operations.md,
// "OpenAPI").
func checkShapeAs(req any, byField map[string]shapeAnswer, other shapeAnswer) error {
	v := apischema.Check(req)
	if v == nil {
		return nil
	}
	a, ok := byField[topField(v.Field)]
	if !ok {
		a = other
	}
	return fail(a.status, a.code, v.Message())
}

// topField is the top-level key of a Violation's dotted or indexed field.
func topField(f string) string {
	if i := strings.IndexAny(f, ".["); i >= 0 {
		return f[:i]
	}
	return f
}

// checkParams refuses a request whose path or query parameter breaks a
// rule of its field's `schema` tag, the declaration the OpenAPI document's
// parameter schema is built from (docs/operations.md, "OpenAPI"), with the
// field's `refuse` status and code (422 bad_param for a query parameter
// that names none). A zero value is absent and not checked. The message
// names the parameter and its rule, never the value.
func checkParams(req any) error {
	for _, p := range adminapi.ParamsOf(req) {
		if v := apischema.RulesOf(p.Tag).CheckValue(p.Value, "parameter "+p.Name); v != nil {
			return fail(p.Status, p.Code, v.Message())
		}
	}
	return nil
}
